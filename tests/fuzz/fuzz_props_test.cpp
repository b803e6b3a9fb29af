// The fuzz targets in the ordinary (g++) build, driven by RapidCheck instead of libFuzzer
// (docs/fuzz.md): each case is a seed file (tests/fuzz/corpus, scenarios/) under a list of
// mutations (bit flips, bytes, dictionary tokens, cut and copied ranges, splices with another
// seed, and the hostile shapes: nesting 100 000 deep, a 1 MB string); the scenario reader
// also gets documents built from the schema's keys with extreme values. A case passes when
// the target returns (accepted, or refused with a parity::Error) within a generous time
// bound. A failing case is shrunk to the fewest mutations and written to
// $PARITY_FUZZ_OUT/<target>.crash (default: the working directory), which the libFuzzer
// binary replays: `fuzz_<target> FILE`.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "fuzz/fuzz_targets.h"

namespace parity::fuzz {
namespace {

using Target = bool (*)(const uint8_t*, size_t);

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A libFuzzer dictionary: one "token" per line, with \\, \" and \xNN escapes.
std::vector<std::string> read_dict(const std::string& target) {
  std::ifstream in(std::string(PARITY_SOURCE_DIR) + "/tests/fuzz/" + target + ".dict");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (line.size() < 2 || line.front() != '"' || line.back() != '"') continue;
    std::string tok;
    for (size_t i = 1; i + 1 < line.size(); ++i) {
      if (line[i] != '\\' || i + 2 >= line.size()) {
        tok += line[i];
      } else if (line[i + 1] == 'x' && i + 4 < line.size()) {
        tok += static_cast<char>(std::stoi(line.substr(i + 2, 2), nullptr, 16));
        i += 3;
      } else {
        tok += line[++i];
      }
    }
    out.push_back(tok);
  }
  return out;
}

struct Seeds {
  std::vector<std::string> files, texts, dict;
};

const Seeds& seeds(const std::string& target) {
  static std::map<std::string, Seeds> cache;
  Seeds& s = cache[target];
  if (s.files.empty()) {
    s.files = seed_files(PARITY_SOURCE_DIR, target);
    for (const auto& f : s.files) s.texts.push_back(read_file(f));
    s.dict = read_dict(target);
  }
  return s;
}

enum Kind {
  flip,
  set_byte,
  insert_byte,
  erase,
  copy_range,
  token,
  nest,
  long_string,
  cut,
  splice,
  json_leaf,
  json_leaf2,
  kKinds
};

struct Mutation {
  int kind = 0;
  uint32_t at = 0, len = 0, pick = 0;
};

void apply(std::string& b, const Mutation& m, const Seeds& s) {
  const size_t at = b.empty() ? 0 : m.at % (b.size() + 1);
  const size_t len = std::min<size_t>(m.len, b.size() - at);
  switch (m.kind) {
    case flip:
      if (at < b.size()) b[at] = static_cast<char>(b[at] ^ (1 << (m.pick % 8)));
      break;
    case set_byte:
      if (at < b.size()) b[at] = static_cast<char>(m.pick);
      break;
    case insert_byte: b.insert(at, 1, static_cast<char>(m.pick)); break;
    case erase: b.erase(at, len); break;
    case copy_range: b.insert(m.pick % (b.size() + 1), b.substr(at, len)); break;
    case token:
      if (!s.dict.empty()) b.insert(at, s.dict[m.pick % s.dict.size()]);
      break;
    case nest: {  // every fourth: the 100 000 levels; else a few
      const size_t depth = m.pick % 4 == 0 ? 100000 : 1 + m.pick % 40;
      const bool obj = (m.pick >> 8) % 2 != 0;
      std::string open, close;
      for (size_t i = 0; i < depth; ++i) open += obj ? "{\"a\":" : "[", close += obj ? "}" : "]";
      b.insert(at + len, close);
      b.insert(at, open);
      break;
    }
    case long_string: {  // every eighth: past the 1 MiB file limit; else a few kB
      const size_t n = m.pick % 8 == 0 ? (size_t{1} << 20) + 17 : m.pick % 6000;
      b.insert(at, "\"" + std::string(n, static_cast<char>('a' + m.len % 26)) + "\"");
      break;
    }
    case cut: b.resize(at); break;
    case splice: {
      const std::string& other = s.texts[m.pick % s.texts.size()];
      b = b.substr(0, at) + other.substr(std::min<size_t>(m.len, other.size()));
      break;
    }
    case json_leaf:
    case json_leaf2: {  // structure-aware (twice as likely): one value changed, the JSON kept valid
      std::string out = mutate_json_leaf(b, m.pick);
      if (!out.empty()) b = std::move(out);
      break;
    }
    default: break;
  }
}

// An input and how it was made, shown briefly when a case fails (the whole of it is saved).
struct Input {
  std::string bytes;
  size_t seed = 0;
  std::vector<Mutation> mutations;
};

void showValue(const Input& in, std::ostream& os) {
  os << in.bytes.size() << " bytes from seed " << in.seed << " after " << in.mutations.size()
     << " mutations; head: ";
  for (size_t i = 0; i < std::min<size_t>(in.bytes.size(), 160); ++i) {
    const auto c = static_cast<unsigned char>(in.bytes[i]);
    if (c >= 0x20 && c < 0x7f) os << static_cast<char>(c);
    else os << "\\x" << "0123456789abcdef"[c >> 4] << "0123456789abcdef"[c & 15];
  }
}

rc::Gen<Mutation> gen_mutation() {
  return rc::gen::apply(
      [](int kind, uint32_t at, uint32_t len, uint32_t pick) {
        return Mutation{kind, at, len, pick};
      },
      rc::gen::inRange(0, static_cast<int>(kKinds)), rc::gen::arbitrary<uint32_t>(), rc::gen::inRange<uint32_t>(0, 64),
      rc::gen::arbitrary<uint32_t>());
}

rc::Gen<std::vector<Mutation>> gen_mutations() {
  return rc::gen::mapcat(rc::gen::inRange(0, 9), [](int n) {
    return rc::gen::container<std::vector<Mutation>>(static_cast<size_t>(n), gen_mutation());
  });
}

// A seed under 0..8 mutations, of the whole file.
rc::Gen<Input> gen_input(const std::string& target) {
  const Seeds* s = &seeds(target);
  return rc::gen::apply(
      [s](size_t seed, std::vector<Mutation> ms) {
        Input in{s->texts[seed], seed, std::move(ms)};
        for (const auto& m : in.mutations) apply(in.bytes, m, *s);
        return in;
      },
      rc::gen::inRange<size_t>(0, s->texts.size()), gen_mutations());
}

// A safetensors seed whose JSON header is mutated and then given its new true length (a
// mutation of the whole file nearly always breaks only the 8-byte length).
rc::Gen<Input> gen_reframed_safetensors() {
  const Seeds* s = &seeds("safetensors");
  return rc::gen::apply(
      [s](size_t seed, std::vector<Mutation> ms) {
        Input in{s->texts[seed], seed, std::move(ms)};
        uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(in.bytes[static_cast<size_t>(i)]);
        std::string header = in.bytes.substr(8, n), data = in.bytes.substr(8 + n);
        for (const auto& m : in.mutations) apply(header, m, *s);
        std::string len(8, '\0');
        for (size_t i = 0; i < 8; ++i) len[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
        in.bytes = len + header + data;
        return in;
      },
      rc::gen::inRange<size_t>(0, s->texts.size()), gen_mutations());
}

// A scenario document from the schema's keys (a key at most once per object): each value is,
// three times in four, one the key could take (so that documents get past the schema to the
// layout and runner rules), else one at the edges: 0, -1, 2^20, 2^31, 2^40, 2^62, 2^63 - 1,
// 2^64 - 1, wrong types, control characters.
rc::Gen<Input> gen_schema_document() {
  static const std::vector<std::string> edges = {
      "0", "-1", "3", "5", "6", "12", "16", "64", "1048576", "1048577", "2147483648", "1099511627776",
      "4611686018427387904", "9223372036854775807", "18446744073709551615", "0.0", "-0.1", "1.0", "1e300",
      "true", "null", "[]", "{}", "[1, 2]", "\"nccl\"", "\"cuda\"", "\"a\\u001b[31mb\"", "\"\\u009b2J\"",
      "\"a/b\"", "\"\\u007f\""};
  static const std::vector<std::string> size = {"1", "2", "4", "8"}, real = {"0.5", "1e-3", "0.9"},
                                        flag = {"true", "false"};
  struct Key {
    const char* name;
    std::vector<std::string> plausible;
  };
  static const std::vector<std::vector<Key>> sections = {
      {{"name", {"\"n\""}}, {"steps", size}, {"seed", size}, {"data_seed", size}, {"dtype", {"\"fp32\"", "\"fp64\""}}},
      {{"vocab", size}, {"dim", size}, {"layers", size}, {"heads", size}, {"seq", size}, {"batch", size},
       {"microbatches", size}, {"dense_layers", size}, {"mlp_hidden", size}, {"experts", size}, {"top_k", size},
       {"expert_hidden", size}, {"shared_experts", {"0", "1"}}, {"shared_hidden", size},
       {"score", {"\"softmax\"", "\"sigmoid\""}}, {"route_norm", flag}, {"route_scale", real}, {"aux_alpha", real},
       {"bias_rate", real}, {"tie_embeddings", flag}},
      {{"kind", {"\"sgd\"", "\"adam\"", "\"adamw\""}}, {"lr", real}, {"momentum", real}, {"beta1", real},
       {"beta2", real}, {"eps", real}, {"weight_decay", real}, {"clip", real}},
      {{"world", size}, {"dp_replicate", size}, {"dp_shard", size}, {"tp", size}, {"ep", size}, {"etp", size},
       {"sp", flag}, {"backend", {"\"gloo\"", "\"mpi\""}}, {"device", {"\"cpu\""}},
       {"fsdp_dim", {"0", "-1", "1", "\"largest\"", "{\"routed_experts\": 2}", "{\"default\": -1, \"head\": 1}"}}}};
  struct Field {
    size_t key = 0, value = 0;
    bool plausible = true;
  };
  using Fields = std::vector<Field>;
  const auto fields = [](size_t section) {
    const auto field = rc::gen::apply([](size_t k, size_t v, bool p) { return Field{k, v, p}; },
                                      rc::gen::inRange<size_t>(0, sections[section].size()),
                                      rc::gen::inRange<size_t>(0, 64),
                                      rc::gen::weightedElement<bool>({{3, true}, {1, false}}));
    return rc::gen::mapcat(rc::gen::inRange<size_t>(0, 9),
                           [field](size_t n) { return rc::gen::container<Fields>(n, field); });
  };
  const auto object = [](size_t section, const Fields& f) {
    std::string out = "{";
    std::vector<bool> used(sections[section].size(), false);
    for (const Field& x : f) {
      if (used[x.key]) continue;
      used[x.key] = true;
      const Key& k = sections[section][x.key];
      const std::string& v = x.plausible ? k.plausible[x.value % k.plausible.size()] : edges[x.value % edges.size()];
      out += (out.size() > 1 ? ", \"" : "\"") + std::string(k.name) + "\": " + v;
    }
    return out + "}";
  };
  return rc::gen::apply(
      [object](const Fields& top, const Fields& model, const Fields& optim, const Fields& layout,
               const rc::Maybe<std::pair<size_t, Fields>>& resume) {
        std::string doc = object(0, top);
        doc.pop_back();
        doc += std::string(doc.size() > 1 ? ", " : "") + "\"model\": " + object(1, model) + ", \"optim\": " +
               object(2, optim) + ", \"layout\": " + object(3, layout);
        if (resume)
          doc += ", \"resume\": {\"save_at\": " + size[resume->first % size.size()] + ", \"layout\": " +
                 object(3, resume->second) + "}";
        return Input{doc + "}", 0, {}};
      },
      fields(0), fields(1), fields(2), fields(3),
      rc::gen::maybe(rc::gen::pair(rc::gen::inRange<size_t>(0, 4), fields(3))));
}

// Runs the target on the input: it must return (or refuse with parity::Error) before the
// bound; a failing input is saved whole for the libFuzzer binary to replay.
void run_case(Target target, const std::string& name, const Input& in) {
  const auto t0 = std::chrono::steady_clock::now();
  bool accepted = false;
  try {
    accepted = target(reinterpret_cast<const uint8_t*>(in.bytes.data()), in.bytes.size());
  } catch (...) {
    const char* dir = std::getenv("PARITY_FUZZ_OUT");
    std::ofstream(std::string(dir != nullptr ? dir : ".") + "/" + name + ".crash", std::ios::binary) << in.bytes;
    throw;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RC_CLASSIFY(accepted, "accepted");
  RC_CLASSIFY(in.bytes.size() > (size_t{1} << 20), "larger than 1 MiB");
  RC_ASSERT(s < 5.0);  // ended before 5 s (a real case takes well under a millisecond)
}

RC_GTEST_PROP(Fuzz, ScenarioReaderOnMutatedFiles, ()) {
  run_case(scenario_reader, "scenario", *gen_input("scenario"));
}

RC_GTEST_PROP(Fuzz, ScenarioReaderOnSchemaDocuments, ()) {
  run_case(scenario_reader, "scenario_schema", *gen_schema_document());
}

RC_GTEST_PROP(Fuzz, CkptMetadataReaderOnMutatedFiles, ()) {
  run_case(ckpt_metadata_reader, "ckpt_metadata", *gen_input("ckpt_metadata"));
}

RC_GTEST_PROP(Fuzz, SafetensorsReaderOnMutatedFiles, ()) {
  run_case(safetensors_reader, "safetensors", *gen_input("safetensors"));
}

RC_GTEST_PROP(Fuzz, SafetensorsReaderOnMutatedHeaders, ()) {
  run_case(safetensors_reader, "safetensors_header", *gen_reframed_safetensors());
}

// The seeds themselves, every one, and the targets' own checks able to fire: a name with an
// escape character is refused with the character escaped, never echoed.
TEST(Fuzz, EverySeedRuns) {
  for (const char* target : {"scenario", "ckpt_metadata", "safetensors"}) {
    const Seeds& s = seeds(target);
    EXPECT_GE(s.texts.size(), 1u) << target;
    EXPECT_GE(s.dict.size(), 10u) << target;
    const Target t = std::string(target) == "scenario" ? scenario_reader
                     : std::string(target) == "ckpt_metadata" ? ckpt_metadata_reader : safetensors_reader;
    for (size_t i = 0; i < s.texts.size(); ++i)
      EXPECT_NO_THROW((void)t(reinterpret_cast<const uint8_t*>(s.texts[i].data()), s.texts[i].size())) << s.files[i];
  }
}

}  // namespace
}  // namespace parity::fuzz
