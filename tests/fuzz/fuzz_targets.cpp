// The fuzz targets (fuzz_targets.h): the real entry points of the three readers, and the
// properties an accepted input must have.
#include "fuzz/fuzz_targets.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "ckpt/format.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "harness/scenario/memory.h"
#include "harness/scenario/scenario.h"

namespace parity::fuzz {

namespace {

namespace fs = std::filesystem;

// A broken property of a reader: an exception of its own type, so that RapidCheck shrinks the
// input and libFuzzer (an uncaught exception aborts) saves it as a crash.
struct Broken : std::logic_error {
  using std::logic_error::logic_error;
};

void require(bool ok, const std::string& what) {
  if (!ok) throw Broken(what);
}

// A refusal's message is printed as it is: it must not carry a control character.
void require_printable(const Error& e, const char* reader) {
  require(is_printable(e.what()), std::string(reader) + ": the message quotes raw control characters: " +
                                      printable(e.what(), 400));
}

// A directory of this process for the metadata reader's file, removed at exit: in memory
// (/dev/shm) when there is one and TMPDIR does not say otherwise (a disk-backed /tmp ran the
// target at ~300 executions per second).
const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::error_code ec;
    const std::string base = tmp != nullptr && *tmp != '\0'     ? tmp
                             : fs::is_directory("/dev/shm", ec) ? "/dev/shm"
                                                                : "/tmp";
    std::string t = base + "/parity-fuzz-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) throw std::runtime_error("fuzz: cannot create a temporary directory");
    static const std::string keep = t;
    std::atexit([] {
      std::error_code ignored;
      fs::remove_all(keep, ignored);
    });
    return t;
  }();
  return dir;
}

}  // namespace

bool scenario_reader(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Scenario s;
  try {
    s = parse_scenario_text(text, "fuzz");
  } catch (const Error& e) {
    require(dynamic_cast<const ConfigError*>(&e) != nullptr,
            std::string("scenario reader: not a ConfigError: ") + e.what());
    require_printable(e, "scenario reader");
    return false;
  }
  // Accepted: it reads back field for field, and its memory estimate is a finite size below
  // the absurd limit (the schema checked it), so no later product of its sizes overflows.
  const nlohmann::json j = scenario_to_json(s);
  require(scenario_to_json(parse_scenario(j, "")) == j, "scenario reader: an accepted scenario does not read back");
  const MemoryEstimate est = estimate_memory(s.model, s.optim, s.layout);
  require(std::isfinite(est.process_bytes) && est.process_bytes > 0 && est.process_bytes <= kAbsurdBytes,
          "scenario reader: accepted sizes beyond the absurd limit");
  return true;
}

bool ckpt_metadata_reader(const uint8_t* data, size_t size) {
  const std::string& dir = scratch_dir();
  {
    std::ofstream out(dir + "/" + ckpt::kMetadataFile, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) throw std::runtime_error("fuzz: cannot write " + dir);
  }
  try {
    const ckpt::Metadata md = ckpt::read_metadata(dir);
    for (const auto& t : md.tensors)
      require(md.find(t.name) != nullptr, "metadata reader: a tensor it lists is not found");
    return true;
  } catch (const Error&) {
    return false;  // refused (its messages quote the file as it is; `parity` escapes them when it prints)
  }
}

bool safetensors_reader(const uint8_t* data, size_t size) {
  const std::vector<unsigned char> bytes(data, data + size);
  try {
    const SafetensorsFile f = SafetensorsFile::parse(bytes, "fuzz.safetensors");
    for (const std::string& name : f.names()) {
      // Accepted: every tensor holds exactly its shape's elements, within the input's size.
      const auto raw = f.bytes(name);
      const int64_t n = numel(f.shape(name));
      require(raw.size() <= bytes.size() && static_cast<int64_t>(raw.size()) == n * dtype_size(f.dtype(name)),
              "safetensors reader: tensor '" + printable(name) + "' does not hold its shape");
      switch (f.dtype(name)) {
        case DType::f32: require(f.get<float>(name).numel() == n, "safetensors reader: get<float>"); break;
        case DType::f64: require(f.get<double>(name).numel() == n, "safetensors reader: get<double>"); break;
        case DType::i64: require(f.get<int64_t>(name).numel() == n, "safetensors reader: get<int64_t>"); break;
      }
    }
    return true;
  } catch (const Error& e) {
    require_printable(e, "safetensors reader");
    return false;
  }
}

namespace {

void collect_leaves(nlohmann::json& j, std::vector<nlohmann::json*>& leaves, std::vector<nlohmann::json*>& objects) {
  if (j.is_object()) {
    if (!j.empty()) objects.push_back(&j);
    for (auto& [k, v] : j.items()) collect_leaves(v, leaves, objects);
  } else if (j.is_array()) {
    for (auto& v : j) collect_leaves(v, leaves, objects);
  } else {
    leaves.push_back(&j);
  }
}

}  // namespace

std::string mutate_json_leaf(const std::string& text, uint64_t random) {
  if (!json_limits_problem(text, JsonLimits{std::size_t{1} << 20, 64, std::size_t{1} << 16}).empty()) return "";
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return "";
  std::vector<nlohmann::json*> leaves, objects;
  collect_leaves(j, leaves, objects);
  if (leaves.empty()) return "";
  uint64_t r = random * 0x9e3779b97f4a7c15ull + 1;
  const auto next = [&r](uint64_t n) {  // xorshift: a number in [0, n)
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    return n == 0 ? 0 : r % n;
  };
  static const std::vector<nlohmann::json> edges = {
      0, 1, 2, 3, -1, 8, int64_t{1} << 20, int64_t{1} << 31, int64_t{1} << 40, int64_t{1} << 62,
      INT64_MAX, INT64_MIN, UINT64_MAX, 0.5, -0.0, 1e300, 1e-300, true, false, nullptr, "", "x", "\x1b[31m",
      nlohmann::json::array(), nlohmann::json::object()};
  nlohmann::json& leaf = *leaves[next(leaves.size())];
  switch (next(5)) {
    case 0: leaf = edges[next(edges.size())]; break;
    case 1:  // one character of a string (a checksum's hex digit, a placement's name)
      if (leaf.is_string() && !leaf.get<std::string>().empty()) {
        std::string v = leaf.get<std::string>();
        v[next(v.size())] = static_cast<char>(next(2) == 0 ? 'g' + next(20) : 0x20 + next(95));
        leaf = v;
      } else {
        leaf = edges[next(edges.size())];
      }
      break;
    case 2:  // a number moved by one, or its sign
      if (leaf.is_number_integer())  // wrapping: INT64_MIN - 1 is INT64_MAX, no overflow
        leaf = static_cast<int64_t>(static_cast<uint64_t>(leaf.get<int64_t>()) + (next(2) == 0 ? 1u : ~uint64_t{0}));
      else if (leaf.is_number()) leaf = -leaf.get<double>();
      else leaf = edges[next(edges.size())];
      break;
    case 3:
      if (!objects.empty()) {  // a key removed
        nlohmann::json& o = *objects[next(objects.size())];
        auto it = o.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(next(o.size())));
        o.erase(it);
        break;
      }
      [[fallthrough]];
    default:
      leaf = leaf.is_string() ? nlohmann::json(leaf.get<std::string>() + leaf.get<std::string>())
                              : edges[next(edges.size())];
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string> seed_files(const std::string& source_dir, const std::string& target) {
  std::vector<std::string> dirs = {source_dir + "/tests/fuzz/corpus/" + target};
  if (target == "scenario") dirs.insert(dirs.end(), {source_dir + "/scenarios", source_dir + "/scenarios/gpu"});
  std::vector<std::string> out;
  for (const auto& d : dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.is_regular_file()) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace parity::fuzz
