// Scenario files: defaults, round trip, the shipped scenarios, and one message per class of
// bad input (each names the JSON path and the rule).
#include "harness/scenario/scenario.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "thrown.h"

namespace parity::scenario_test {  // one namespace per file: the tests build as unity batches
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using parity::testing::config_error;

// tiny.json's content with the value at JSON pointer `ptr` replaced.
json tiny_with(const std::string& ptr, const json& value) {
  std::ifstream in(std::string(PARITY_SOURCE_DIR) + "/scenarios/tiny.json");
  json j = json::parse(in);
  j[json::json_pointer(ptr)] = value;
  return j;
}

// Asserts that parsing tiny.json with one value changed fails naming `path` and `rule`.
void expect_refused(const std::string& ptr, const json& value, const std::string& path,
                    const std::string& rule) {
  SCOPED_TRACE(ptr + " = " + value.dump());
  const std::string msg = config_error([&] { parse_scenario(tiny_with(ptr, value), "t"); });
  EXPECT_NE(msg.find(path + ": "), std::string::npos) << msg;
  EXPECT_NE(msg.find(rule), std::string::npos) << msg;
}

class TempDir {
 public:
  TempDir() : dir_(fs::temp_directory_path() / ("parity_scenario_test_" + std::to_string(getpid()))) {
    fs::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& file, const std::string& text) const {
    const fs::path p = dir_ / file;
    std::ofstream(p) << text;
    return p.string();
  }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }

 private:
  fs::path dir_;
};

// Every field set away from its default, with a valid layout beyond world 1.
Scenario all_fields_changed() {
  Scenario s;
  s.name = "changed";
  s.steps = 7;
  s.seed = 18446744073709551615ull;  // the largest seed a file can hold
  s.data_seed = 99;
  ModelConfig& m = s.model;
  m.vocab = 100, m.dim = 24, m.layers = 3, m.heads = 4, m.seq = 12, m.batch = 12;  // 3 micro-batches x dp 4
  m.microbatches = 3, m.dense_layers = 2, m.mlp_hidden = 40, m.experts = 8, m.top_k = 3;
  m.expert_hidden = 20, m.shared_experts = 1, m.shared_hidden = 12;
  m.score = Score::sigmoid, m.route_norm = false, m.route_scale = 2.5;
  m.aux_alpha = 0.1, m.bias_rate = 1.0 / 3.0, m.tie_embeddings = true, m.dtype = DType::f32;
  m.norm = NormKind::rmsnorm, m.qk_norm = true, m.position = Position::rope, m.rope_theta = 500000.0;
  OptimConfig& o = s.optim;
  o.kind = OptimKind::adamw, o.lr = 0.1 + 0.2, o.momentum = 0.5, o.beta1 = 0.8, o.beta2 = 0.95;
  o.eps = 1e-12, o.weight_decay = 0.01, o.clip = 1.0;
  LayoutConfig& l = s.layout;
  l.world = 8, l.dp_replicate = 2, l.dp_shard = 2, l.tp = 2, l.ep = 2, l.etp = 2, l.sp = true;
  l.backend = comm::Backend::mpi;
  return s;
}

TEST(Scenario, EmptyObjectGivesTheDefaultsOfConfigH) {
  const Scenario s = parse_scenario(json::object(), "fallback");
  EXPECT_EQ(s.name, "fallback");
  EXPECT_EQ(s.source, "");
  Scenario expected;
  expected.name = "fallback";
  EXPECT_EQ(scenario_to_json(s), scenario_to_json(expected));
  EXPECT_EQ(s.steps, 10);
  EXPECT_EQ(s.model.dtype, DType::f64);
  EXPECT_EQ(s.optim.kind, OptimKind::adam);
  EXPECT_EQ(s.layout.world, 1);
}

TEST(Scenario, MissingKeysKeepDefaultsNextToGivenOnes) {
  const Scenario s = parse_scenario(
      json{{"model", {{"dim", 32}, {"heads", 4}}}, {"optim", {{"kind", "sgd"}}}}, "x");
  EXPECT_EQ(s.model.dim, 32);
  EXPECT_EQ(s.model.heads, 4);
  EXPECT_EQ(s.model.vocab, ModelConfig{}.vocab);
  EXPECT_EQ(s.optim.kind, OptimKind::sgd);
  EXPECT_EQ(s.optim.lr, OptimConfig{}.lr);
}

// issue 47: model.norm is written only where it is not layernorm, so the files, dumps and
// checkpoints written before it read back the same words; rmsnorm round-trips.
TEST(Scenario, NormWrittenOnlyAwayFromItsDefault) {
  Scenario s;
  EXPECT_FALSE(scenario_to_json(s)["model"].contains("norm"));
  s.model.norm = NormKind::rmsnorm;
  const json j = scenario_to_json(s);
  EXPECT_EQ(j["model"]["norm"], "rmsnorm");
  EXPECT_EQ(parse_scenario(j, "x").model.norm, NormKind::rmsnorm);
  EXPECT_EQ(parse_scenario(json{{"model", {{"norm", "layernorm"}}}}, "x").model.norm, NormKind::layernorm);
  EXPECT_FALSE(scenario_to_json(s)["model"].contains("qk_norm"));
  s.model.qk_norm = true;
  EXPECT_EQ(scenario_to_json(s)["model"]["qk_norm"], "rmsnorm");
  EXPECT_TRUE(parse_scenario(scenario_to_json(s), "x").model.qk_norm);
}

// issue 47: model.position is written only under rope, with its rope_theta; an odd head size
// (rope pairs a head's columns), a non-positive base and an unknown kind are refused.
TEST(Scenario, PositionWrittenOnlyUnderRope) {
  Scenario s;
  EXPECT_FALSE(scenario_to_json(s)["model"].contains("position"));
  EXPECT_FALSE(scenario_to_json(s)["model"].contains("rope_theta"));
  s.model.position = Position::rope, s.model.rope_theta = 123.5;
  const json j = scenario_to_json(s);
  EXPECT_EQ(j["model"]["position"], "rope");
  EXPECT_EQ(j["model"]["rope_theta"], 123.5);
  const Scenario back = parse_scenario(j, "x");
  EXPECT_EQ(back.model.position, Position::rope);
  EXPECT_EQ(back.model.rope_theta, 123.5);
  expect_refused("/model/position", "alibi", "$.model.position", R"(expected one of "none", "rope")");
  expect_refused("/model/rope_theta", 0.0, "$.model.rope_theta", "must be > 0");
  json odd = tiny_with("/model/position", "rope");
  odd["model"]["dim"] = 6, odd["model"]["heads"] = 2;
  const std::string msg = config_error([&] { parse_scenario(odd, "t"); });
  EXPECT_NE(msg.find("$.model.position: rope pairs the columns of each head"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(3) must be even"), std::string::npos) << msg;
}

// model.kv_heads (grouped-query attention): written only where it differs from heads (heads itself,
// or the key left out, is plain multi-head attention and reads back as the default); it must
// divide heads and be >= 1.
TEST(Scenario, KvHeadsWrittenOnlyWhereItDiffersFromHeads) {
  const Scenario mha = parse_scenario(tiny_with("/model/kv_heads", 2), "t");
  EXPECT_EQ(mha.model.kv_heads, 0);
  EXPECT_EQ(mha.model.kv(), 2);
  EXPECT_FALSE(scenario_to_json(mha)["model"].contains("kv_heads"));
  const Scenario mqa = parse_scenario(tiny_with("/model/kv_heads", 1), "t");
  EXPECT_EQ(mqa.model.kv(), 1);
  EXPECT_EQ(scenario_to_json(mqa)["model"]["kv_heads"], 1);
  EXPECT_EQ(parse_scenario(scenario_to_json(mqa), "x").model.kv(), 1);
  expect_refused("/model/kv_heads", 0, "$.model.kv_heads", "must be >= 1, got 0");
  expect_refused("/model/kv_heads", 3, "$.model.kv_heads",
                 "must divide model.heads (2: each key / value head serves a whole group of query heads), got 3");
}

TEST(Scenario, RoundTripKeepsEveryField) {
  const Scenario s = all_fields_changed();
  const json j = scenario_to_json(s);
  // The check can fire only if every field differs from its default.
  const json defaults = scenario_to_json(Scenario{}).flatten();
  const json flat = j.flatten();
  for (const auto& [ptr, value] : flat.items()) {
    if (!defaults.contains(ptr)) continue;  // written only away from its default (model.norm): it differs
    EXPECT_NE(value, defaults.at(ptr)) << ptr << " still has its default";
  }
  const Scenario back = parse_scenario(j, "other");
  EXPECT_EQ(scenario_to_json(back), j);
  EXPECT_EQ(back.name, "changed");
  EXPECT_EQ(back.seed, s.seed);
  EXPECT_EQ(back.optim.lr, s.optim.lr);  // bitwise: 0.1 + 0.2 is not 0.3
  EXPECT_EQ(back.model.bias_rate, s.model.bias_rate);
  // Through text as well, as a file would hold it.
  EXPECT_EQ(scenario_to_json(parse_scenario(json::parse(j.dump(2)), "")), j);
}

// layout.order: read, written back only when not the default (old files stay as they were).
TEST(Scenario, RankOrderIsReadAndWrittenBackWhenNotTheDefault) {
  const Scenario d = parse_scenario(tiny_with("/layout", {{"world", 4}, {"dp_shard", 2}, {"tp", 2}, {"ep", 2},
                                                          {"order", "deepspeed"}}), "t");
  EXPECT_EQ(d.layout.order, RankOrder::deepspeed);
  const json j = scenario_to_json(d);
  EXPECT_EQ(j.at("layout").at("order"), "deepspeed");
  EXPECT_EQ(parse_scenario(j, "t").layout.order, RankOrder::deepspeed);
  const Scenario m = parse_scenario(tiny_with("/layout", {{"world", 2}, {"tp", 2}, {"order", "megatron"}}), "t");
  EXPECT_EQ(m.layout.order, RankOrder::megatron);
  EXPECT_FALSE(scenario_to_json(m).at("layout").contains("order"));
}

TEST(Scenario, TinyFileHasTheAgreedSizes) {
  const std::string path = std::string(PARITY_SOURCE_DIR) + "/scenarios/tiny.json";
  const Scenario s = load_scenario(path);
  EXPECT_EQ(s.name, "tiny");
  EXPECT_EQ(s.source, path);
  EXPECT_EQ(s.steps, 20);
  EXPECT_EQ(s.model.dtype, DType::f64);
  EXPECT_EQ(s.model.vocab, 64);
  EXPECT_EQ(s.model.layers, 2);
  EXPECT_EQ(s.model.dense_layers, 1);
  EXPECT_EQ(s.model.microbatches, 2);
  EXPECT_EQ(s.model.shared_experts, 1);
  EXPECT_EQ(s.model.aux_alpha, 0.01);
  EXPECT_EQ(s.model.bias_rate, 0.001);
  EXPECT_EQ(s.optim.kind, OptimKind::adam);
  EXPECT_EQ(s.optim.lr, 3e-3);
}

TEST(Scenario, EveryShippedScenarioLoadsAndValidates) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(std::string(PARITY_SOURCE_DIR) + "/scenarios")) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    Scenario s;
    EXPECT_NO_THROW(s = load_scenario(entry.path().string()));
    EXPECT_NO_THROW(validate_scenario(s));
    ++count;
  }
  EXPECT_GE(count, 2);
}

TEST(Scenario, NameDefaultsToTheFileStem) {
  TempDir dir;
  const Scenario s = load_scenario(dir.write("my_run.json", R"({"steps": 3})"));
  EXPECT_EQ(s.name, "my_run");
  EXPECT_EQ(s.steps, 3);
}

TEST(Scenario, UnknownKeysAreRefusedWithTheAllowedOnes) {
  std::string msg = config_error([] { parse_scenario(json{{"stepz", 1}}, "t"); });
  EXPECT_NE(msg.find("$.stepz: unknown key"), std::string::npos) << msg;
  EXPECT_NE(msg.find("steps"), std::string::npos) << msg;
  expect_refused("/model/head", 2, "$.model.head", "allowed keys are: vocab, dim");
  expect_refused("/optim/beta", 0.9, "$.optim.beta", "allowed keys are: kind, lr");
  expect_refused("/layout/vpp", 2, "$.layout.vpp", "unknown key");  // pp_virtual is the key
}

TEST(Scenario, WrongTypesNameTheExpectedType) {
  expect_refused("/model/heads", "2", "$.model.heads", "expected an integer, got string");
  expect_refused("/model/heads", 2.5, "$.model.heads", "expected an integer, got number 2.5");
  expect_refused("/model/heads", 2.0, "$.model.heads", "expected an integer");
  expect_refused("/model/route_norm", 1, "$.model.route_norm", "expected a boolean");
  expect_refused("/layout/sp", "yes", "$.layout.sp", "expected a boolean");
  expect_refused("/optim/lr", "fast", "$.optim.lr", "expected a number");
  expect_refused("/optim/lr", nullptr, "$.optim.lr", "expected a number, got null");
  expect_refused("/name", 3, "$.name", "expected a string");
  expect_refused("/model", json::array(), "$.model", "expected an object, got array");
  expect_refused("/seed", -1, "$.seed", "must be a non-negative integer");
  expect_refused("/data_seed", 1.5, "$.data_seed", "expected a non-negative integer");
  expect_refused("/steps", 18446744073709551615ull, "$.steps", "integer too large");
  expect_refused("/dtype", "int64", "$.dtype", R"(expected one of "fp64", "fp32")");
  expect_refused("/model/score", "relu", "$.model.score", R"(expected one of "softmax")");
  expect_refused("/model/norm", "batchnorm", "$.model.norm", R"(expected one of "layernorm", "rmsnorm")");
  expect_refused("/model/qk_norm", true, "$.model.qk_norm", R"(expected one of "off", "rmsnorm")");
  expect_refused("/optim/kind", "lion", "$.optim.kind", R"("sgd", "adam", "adamw")");
  expect_refused("/layout/backend", "tcp", "$.layout.backend", R"("gloo", "mpi", "nccl")");
  expect_refused("/layout/device", "tpu", "$.layout.device", R"(expected one of "cpu", "cuda")");
  const std::string msg = config_error([] { parse_scenario(json::array(), "t"); });
  EXPECT_NE(msg.find("$: expected an object"), std::string::npos) << msg;
}

TEST(Scenario, ModelValuesOutOfRange) {
  expect_refused("/model/vocab", 1, "$.model.vocab", "must be >= 2, got 1");
  expect_refused("/model/dim", 0, "$.model.dim", "must be >= 1");
  expect_refused("/model/layers", 0, "$.model.layers", "must be >= 1");
  expect_refused("/model/heads", 3, "$.model.heads", "must divide model.dim (16), got 3");
  expect_refused("/model/heads", 0, "$.model.heads", "must be >= 1");
  expect_refused("/model/seq", 0, "$.model.seq", "must be >= 1");
  expect_refused("/model/batch", -4, "$.model.batch", "must be >= 1");
  expect_refused("/model/microbatches", 5, "$.model.microbatches", "must be in [1, model.batch (4)], got 5");
  expect_refused("/model/microbatches", 0, "$.model.microbatches", "must be >= 1");
  expect_refused("/model/dense_layers", 3, "$.model.dense_layers", "must be in [0, model.layers = 2]");
  expect_refused("/model/dense_layers", -1, "$.model.dense_layers", "must be in [0,");
  expect_refused("/model/mlp_hidden", 0, "$.model.mlp_hidden", "must be >= 1");
  expect_refused("/model/experts", 0, "$.model.experts", "must be >= 1");
  expect_refused("/model/top_k", 5, "$.model.top_k", "must be in [1, model.experts = 4], got 5");
  expect_refused("/model/top_k", 0, "$.model.top_k", "must be in [1,");
  expect_refused("/model/expert_hidden", 0, "$.model.expert_hidden", "must be >= 1");
  expect_refused("/model/shared_experts", 2, "$.model.shared_experts", "must be in [0, 1]");
  expect_refused("/model/shared_hidden", 0, "$.model.shared_hidden", "must be >= 1");
  expect_refused("/model/route_scale", 0, "$.model.route_scale", "must be > 0");
  expect_refused("/model/aux_alpha", -0.5, "$.model.aux_alpha", "must be >= 0, got -0.5");
  expect_refused("/model/bias_rate", -1e-3, "$.model.bias_rate", "must be >= 0");
  expect_refused("/steps", -1, "$.steps", "must be >= 1: a run of no step compares nothing, got -1");
  expect_refused("/steps", 0, "$.steps", "must be >= 1: a run of no step compares nothing, got 0");
}

TEST(Scenario, OptimizerValuesOutOfRange) {
  expect_refused("/optim/lr", 0, "$.optim.lr", "must be > 0, got 0");
  expect_refused("/optim/lr", -1e-3, "$.optim.lr", "must be > 0");
  expect_refused("/optim/momentum", 1, "$.optim.momentum", "must be in [0, 1)");
  expect_refused("/optim/beta1", 1.0, "$.optim.beta1", "must be in [0, 1), got 1");
  expect_refused("/optim/beta2", -0.1, "$.optim.beta2", "must be in [0, 1)");
  expect_refused("/optim/eps", 0, "$.optim.eps", "must be > 0");
  expect_refused("/optim/weight_decay", -1, "$.optim.weight_decay", "must be >= 0");
  expect_refused("/optim/clip", -1, "$.optim.clip", "must be >= 0");
}

TEST(Scenario, NonFiniteValuesBuiltInCodeAreRefused) {
  Scenario s;
  s.optim.lr = std::numeric_limits<double>::infinity();
  std::string msg = config_error([&] { validate_scenario(s); });
  EXPECT_NE(msg.find("$.optim.lr: must be finite"), std::string::npos) << msg;
  s = Scenario{};
  s.model.aux_alpha = std::numeric_limits<double>::quiet_NaN();
  msg = config_error([&] { validate_scenario(s); });
  EXPECT_NE(msg.find("$.model.aux_alpha: must be finite"), std::string::npos) << msg;
  s = Scenario{};
  s.model.dtype = DType::i64;
  msg = config_error([&] { validate_scenario(s); });
  EXPECT_NE(msg.find("$.dtype: must be fp32 or fp64"), std::string::npos) << msg;
  s = Scenario{};
  s.name = "a/b";
  msg = config_error([&] { validate_scenario(s); });
  EXPECT_NE(msg.find("$.name: must not contain path separators"), std::string::npos) << msg;
}

TEST(Scenario, LayoutRules) {
  const auto layout = [](json l) { return tiny_with("/layout", std::move(l)); };
  const auto refused = [&](json l, const std::string& path, const std::string& rule) {
    SCOPED_TRACE(l.dump());
    const std::string msg = config_error([&] { parse_scenario(layout(l), "t"); });
    EXPECT_NE(msg.find(path + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(rule), std::string::npos) << msg;
  };
  refused({{"world", 0}}, "$.layout.world", "must be >= 1");
  refused({{"world", 2}, {"dp_shard", 2}, {"etp", 0}}, "$.layout.etp", "must be >= 1");
  refused({{"world", 4}, {"dp_shard", 2}}, "$.layout.world",
          "must equal dp_replicate*dp_shard*tp (1*2*1), got 4");
  refused({{"world", 2}, {"tp", 2}, {"etp", 3}}, "$.layout.ep",
          "dp_replicate*ep*etp (1*1*3) must divide layout.world (2)");
  refused({{"world", 4}, {"tp", 4}, {"order", "torch"}}, "$.layout.order",
          "expected one of \"megatron\", \"deepspeed\", got string \"torch\"");
  refused({{"world", 4}, {"tp", 4}, {"order", 1}}, "$.layout.order", "expected one of \"megatron\", \"deepspeed\"");
  refused({{"world", 2}, {"dp_shard", 2}, {"ep", 4}}, "$.layout.ep",
          "dp_replicate*ep*etp (1*4*1) must divide layout.world (2)");
  refused({{"world", 6}, {"dp_shard", 6}, {"ep", 3}}, "$.layout.ep",
          "must divide model.experts (4) so that each EP rank holds whole experts, got 3");
  refused({{"world", 4}, {"tp", 4}}, "$.layout.tp",
          "must divide model.heads (2) so that each TP rank holds whole heads, got 4");
  refused({{"sp", true}}, "$.layout.sp", "requires layout.tp > 1");
  refused({{"world", 3}, {"dp_shard", 3}, {"dp_replicate", 1}, {"tp", 1}, {"sp", true}},
          "$.layout.sp", "requires layout.tp > 1");
  refused({{"world", 4611686018427387904}, {"dp_shard", 4611686018427387904}, {"tp", 4}},
          "$.layout.world", "must be <= 1048576, got 4611686018427387904");
  refused({{"world", 4}, {"dp_shard", 4611686018427387904}, {"tp", 4}},  // the product overflows
          "$.layout.world", "must equal dp_replicate*dp_shard*tp (1*4611686018427387904*4), got 4");
  // context parallel (seq 8): world counts cp; cp divides seq, cp*tp under SP; cpu only
  refused({{"world", 2}, {"cp", 0}}, "$.layout.cp", "must be >= 1");
  refused({{"world", 2}, {"cp", 2}, {"tp", 2}}, "$.layout.world",
          "must equal dp_replicate*dp_shard*cp*tp (1*1*2*2), got 2");
  refused({{"world", 3}, {"cp", 3}}, "$.layout.cp", "must divide model.seq (8)");
  refused({{"world", 16}, {"cp", 8}, {"tp", 2}, {"sp", true}}, "$.layout.sp",
          "layout.cp*layout.tp (8*2) to divide model.seq (8)");
  EXPECT_NO_THROW(parse_scenario(layout({{"world", 2}, {"cp", 2}, {"device", "cuda"}}), "t"));  // cp runs on cuda

  // Layouts beyond world 1 that can exist are accepted (FOLDINGS.md's group tables), with a
  // batch that splits over their data-parallel ranks (the runner's rule, validate in mesh/layout_config.h).
  for (const json& ok : {json{{"world", 8}, {"dp_shard", 4}, {"tp", 2}, {"ep", 4}, {"etp", 1}},
                         json{{"world", 8}, {"dp_shard", 4}, {"tp", 2}, {"ep", 2}, {"etp", 2}},
                         json{{"world", 2}, {"tp", 2}, {"ep", 2}, {"sp", true}},
                         json{{"world", 4}, {"cp", 2}, {"tp", 2}, {"sp", true}, {"ep", 2}},
                         json{{"world", 8}, {"dp_shard", 2}, {"cp", 4}, {"ep", 4}},
                         json{{"world", 4}, {"dp_replicate", 2}, {"dp_shard", 2}, {"ep", 2},
                              {"backend", "nccl"}}}) {
    SCOPED_TRACE(ok.dump());
    json j = layout(ok);
    j["model"]["batch"] = 16;
    EXPECT_NO_THROW(parse_scenario(j, "t"));
  }
}

TEST(Scenario, SequenceParallelNeedsTpToDivideSeq) {
  json j = tiny_with("/layout", {{"world", 2}, {"tp", 2}, {"sp", true}});
  j["model"]["seq"] = 7;
  const std::string msg = config_error([&] { parse_scenario(j, "t"); });
  EXPECT_NE(msg.find("$.layout.sp: sequence parallel requires layout.tp (2) to divide model.seq (7)"),
            std::string::npos)
      << msg;
}

TEST(Scenario, FileProblemsNameTheFile) {
  TempDir dir;
  std::string msg = config_error([&] { load_scenario(dir.path("absent.json")); });
  EXPECT_NE(msg.find("absent.json: cannot open"), std::string::npos) << msg;

  msg = config_error([&] { load_scenario(dir.path("")); });
  EXPECT_NE(msg.find("cannot open scenario file: it is a directory"), std::string::npos) << msg;

  const std::string bad = dir.write("bad.json", "{\n  \"steps\": 3,\n  \"seed\": \n}\n");
  msg = config_error([&] { load_scenario(bad); });
  EXPECT_NE(msg.find(bad + ": invalid JSON: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 4, column 1"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;

  const std::string dup = dir.write("dup.json", R"({"model": {"heads": 2, "dim": 16, "heads": 4}})");
  msg = config_error([&] { load_scenario(dup); });
  EXPECT_NE(msg.find(dup + ": $.model.heads: duplicate key"), std::string::npos) << msg;

  const std::string huge = dir.write("huge.json", R"({"optim": {"lr": 1e400}})");
  msg = config_error([&] { load_scenario(huge); });
  EXPECT_NE(msg.find(huge + ": invalid JSON: number overflow"), std::string::npos) << msg;

  const std::string range = dir.write("range.json", R"({"model": {"heads": 3}})");
  msg = config_error([&] { load_scenario(range); });
  EXPECT_NE(msg.find(range + ": $.model.heads: must divide model.dim"), std::string::npos) << msg;
  try {
    load_scenario(range);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), range + ": $.model.heads");
    EXPECT_EQ(e.rule(), "must divide model.dim (16), got 3");
  }
}

// The runner's rules (validate, mesh/layout_config.h) run with the schema: a file is refused once,
// before any rank starts, at the JSON path. Uneven data-parallel batches are accepted (a
// rank may take no sequence); what is refused is a micro-batch with no sequence.
TEST(Scenario, UnevenDataParallelBatchesAreAcceptedEmptyMicroBatchesAreNot) {
  json j = tiny_with("/layout", {{"world", 5}, {"dp_shard", 5}});
  j["model"]["batch"] = 8;
  j["model"]["microbatches"] = 3;
  EXPECT_NO_THROW(parse_scenario(j, "t"));  // micro-batches 3, 3, 2, each over 5 ranks
  j["model"]["batch"] = 2;
  std::string msg = config_error([&] { parse_scenario(j, "t"); });
  EXPECT_NE(msg.find("$.model.microbatches: must be in [1, model.batch (2)], got 3: every micro-batch holds at "
                     "least one whole sequence"),
            std::string::npos)
      << msg;
  j["model"]["batch"] = 8;
  j["steps"] = 4;
  j["resume"] = {{"save_at", 2}, {"layout", {{"world", 3}, {"dp_shard", 3}}}};
  EXPECT_NO_THROW(parse_scenario(j, "t"));
  // a scenario built in code meets the same rule on every rank (ParallelRun's validate)
  Scenario s = parse_scenario(j, "t");
  s.model.microbatches = 9;
  msg = config_error([&] { (void)validate(s.layout, s.model); });
  EXPECT_NE(msg.find("$.model.microbatches: must be in [1, model.batch (8)], got 9"), std::string::npos) << msg;
}

TEST(Scenario, AbsurdSizesAreBadInputNamingTheLargestTensor) {
  std::string msg = config_error([] { parse_scenario(json{{"model", {{"dim", int64_t{1} << 40}}}}, "t"); });
  EXPECT_NE(msg.find("$.model: sizes beyond any machine"), std::string::npos) << msg;
  EXPECT_NE(msg.find("attention weight (dim x dim): 1.21e+24 elements"), std::string::npos) << msg;
  msg = config_error([] { parse_scenario(json{{"model", {{"vocab", int64_t{1} << 50}}}}, "t"); });
  EXPECT_NE(msg.find("the largest tensor is the logits"), std::string::npos) << msg;
  // Large but not absurd: valid (whether it fits this machine is `parity run`'s check, exit 77).
  EXPECT_NO_THROW(parse_scenario(json{{"model", {{"dim", 1 << 20}, {"heads", 2}}}}, "t"));
}

TEST(Scenario, NamesAreShortAndPrintableAndQuotedEscaped) {
  std::string msg = config_error([] { parse_scenario(json{{"name", std::string(129, 'n')}}, "t"); });
  EXPECT_NE(msg.find("$.name: must be at most 128 bytes, got 129"), std::string::npos) << msg;
  EXPECT_NO_THROW(parse_scenario(json{{"name", std::string(128, 'n')}}, "t"));
  msg = config_error([] { parse_scenario(json{{"name", "a\x1b[31mred"}}, "t"); });
  EXPECT_NE(msg.find("got \"a\\x1b[31mred\""), std::string::npos) << msg;
  msg = config_error([] { parse_scenario(json{{"name", "csi\xc2\x9b"}}, "t"); });  // C1 control, valid UTF-8
  EXPECT_NE(msg.find("csi\\xc2\\x9b"), std::string::npos) << msg;
  EXPECT_NO_THROW(parse_scenario(json{{"name", "caf\xc3\xa9"}}, "t"));
  msg = config_error([] { parse_scenario(json{{"model", {{"\x1b]0;x\x07", 1}}}}, "t"); });
  EXPECT_NE(msg.find("$.model.\\x1b]0;x\\x07: unknown key"), std::string::npos) << msg;
  msg = config_error([] { parse_scenario(json{{"optim", {{"kind", "\x7f"}}}}, "t"); });
  EXPECT_NE(msg.find("got string \"\\x7f\""), std::string::npos) << msg;
}

// kScenarioLimits: checked before the parser, named with where it broke.
TEST(Scenario, FileLimitsAreCheckedBeforeParsing) {
  TempDir dir;
  std::string msg =
      config_error([&] { load_scenario(dir.write("deep.json", std::string(100000, '[') + std::string(100000, ']'))); });
  EXPECT_NE(msg.find("deep.json: refused before parsing: nesting deeper than 32 levels at line 1, column 33"),
            std::string::npos) << msg;
  msg =
      config_error([&] { load_scenario(dir.write("long.json", "{\"name\": \"" + std::string(1000000, 'a') + "\"}")); });
  EXPECT_NE(msg.find("long.json: refused before parsing: a string longer than 4096 bytes at line 1, column 10"),
            std::string::npos) << msg;
  msg = config_error([&] { load_scenario(dir.write("big.json", std::string(kScenarioLimits.max_bytes, ' ') + "{}")); });
  EXPECT_NE(msg.find("big.json: scenario file larger than 1048576 bytes"), std::string::npos) << msg;
  msg = config_error([] { load_scenario("/dev/zero"); });  // endless: refused before a byte is read (issue 26)
  EXPECT_NE(msg.find("/dev/zero: scenario file is a character device, not a regular file"), std::string::npos) << msg;
  // Nesting within the limit reaches the schema as usual.
  msg = config_error([&] { load_scenario(dir.write("ok_depth.json", "{\"model\": [[[[1]]]]}")); });
  EXPECT_NE(msg.find("ok_depth.json: $.model: expected an object, got array [[[[1]]]]"), std::string::npos) << msg;
}

// The precision policy (docs/precision.md): "precision" or its older name "dtype", not both.
TEST(Scenario, PrecisionIsReadCheckedAndWrittenBack) {
  json j = tiny_with("/precision", "bf16");
  j.erase("dtype");
  const Scenario s = parse_scenario(j, "t");
  EXPECT_EQ(s.model.dtype, DType::f32);
  EXPECT_EQ(s.model.store, Low::bf16);
  EXPECT_EQ(s.model.reduce, Low::none);
  const json back = scenario_to_json(s);
  EXPECT_EQ(back.at("precision"), "bf16");
  EXPECT_FALSE(back.contains("dtype"));
  EXPECT_EQ(parse_scenario(back, "t").model.precision(), s.model.precision());
  j["precision"] = "bf16-reduce-bf16";
  EXPECT_EQ(parse_scenario(j, "t").model.reduce, Low::bf16);
  // an fp64 / fp32 file keeps its "dtype" key when written back
  EXPECT_EQ(scenario_to_json(parse_scenario(tiny_with("/dtype", "fp32"), "t")).at("dtype"), "fp32");
  expect_refused("/precision", "bf16", "$.precision", "give precision or dtype, not both");
  json k = tiny_with("/precision", "fp16");
  k.erase("dtype");
  EXPECT_EQ(parse_scenario(k, "t").model.store, Low::fp16);  // fp16 with dynamic loss scaling (issue 48)
  k["precision"] = 16;
  std::string msg = config_error([&] { parse_scenario(k, "t"); });
  EXPECT_NE(msg.find("$.precision: must be a string"), std::string::npos) << msg;
  json c = tiny_with("/layout/device", "cuda");  // bf16 runs on the GPU too (docs/gpu.md)
  c.erase("dtype");
  c["precision"] = "bf16";
  EXPECT_EQ(parse_scenario(c, "t").model.store, Low::bf16);
}

}  // namespace
}  // namespace parity::scenario_test
