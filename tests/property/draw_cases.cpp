// property_draw: the property suite's case generator (generators.h) as a command, so that
// ci/calibrate draws its layouts and models from the same space the property suite explores
// (issue 41 item 3): every folding mode, W = 2..16, uneven batches and shards, tiny models
// that are mostly cancellation. Writes N scenario files (scenario_to_json) into DIR.
//   property_draw N SEED DIR
// Each case is drawn at a size spread over RapidCheck's range (0..100), as a property run
// walks it, from a Random split off the seed: the same N, SEED give the same files.
#include <rapidcheck.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/exit_codes.h"
#include "harness/scenario/scenario.h"
#include "property/generators.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: property_draw N SEED DIR\n");
    return parity::exit_code::bad_input;
  }
  char* end = nullptr;
  const long n = std::strtol(argv[1], &end, 10);
  if (*end != '\0' || n < 1 || n > 1000000) {
    std::fprintf(stderr, "property_draw: N must be an integer in 1..1000000, not '%s'\n", argv[1]);
    return parity::exit_code::bad_input;
  }
  const unsigned long long seed = std::strtoull(argv[2], &end, 10);
  if (*end != '\0' || argv[2][0] == '\0') {
    std::fprintf(stderr, "property_draw: SEED must be a non-negative integer, not '%s'\n", argv[2]);
    return parity::exit_code::bad_input;
  }
  const std::string dir = argv[3];
  rc::Random random(static_cast<uint64_t>(seed));
  const auto gen = parity::property::gen_case(parity::property::CaseSpec{});
  for (long i = 0; i < n; ++i) {
    const int size = static_cast<int>((i * 37) % 101);  // spread over 0..100, as a property run's sizes
    parity::Scenario s = gen(random.split(), size).value();
    s.name = "drawn" + std::to_string(i);
    const std::string path = dir + "/" + s.name + ".json";
    std::ofstream out(path);
    out << parity::scenario_to_json(s).dump(1) << "\n";
    if (!out) {
      std::fprintf(stderr, "property_draw: cannot write %s\n", path.c_str());
      return parity::exit_code::infrastructure;
    }
  }
  return 0;
}
