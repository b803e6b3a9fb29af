// The training state of a run as a checkpoint (ckpt/training_state.h): the one-device
// baseline (W = 1) saves, a fresh run loads, and the state is bitwise the saved one: the
// parameters, the optimizer's moments and step count, the expert bias; the next steps then
// give bitwise the same loss and parameters as the run that never stopped. And the
// scenario's "resume" object (docs/scenario.md): strict reading with JSON paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt_helpers.h"
#include "core/error.h"
#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"

namespace parity {
namespace {

using ckpt::testing::Scratch;
using nlohmann::json;

Scenario moe_scenario(OptimKind kind, DType dt) {
  Scenario s;
  s.model.dim = 16, s.model.heads = 4, s.model.batch = 4, s.model.layers = 2, s.model.dense_layers = 1;
  s.model.shared_experts = 1, s.model.aux_alpha = 0.01, s.model.bias_rate = 0.001, s.model.dtype = dt;
  s.optim.kind = kind, s.optim.lr = 0.01, s.optim.momentum = kind == OptimKind::sgd ? 0.9 : 0.0;
  s.optim.weight_decay = kind == OptimKind::adamw ? 0.1 : 0.0;
  s.steps = 5;
  return s;
}

// Bytes of every local tensor of a state, by name (the comparison is bitwise).
std::map<std::string, std::string> snapshot(const ckpt::ShardedState& st) {
  std::map<std::string, std::string> out;
  for (const ckpt::StateEntry& e : st.entries()) {
    const auto n = static_cast<size_t>(numel(e.local_shape()) * dtype_size(e.dtype));
    out[e.name] = std::string(static_cast<const char*>(e.data()), n);
  }
  return out;
}

template <class T> void expect_round_trip(const Scenario& s, const std::string& dir) {
  const json model = scenario_to_json(s)["model"];
  BaselineRun<T> a(s), b(s);
  for (int64_t t = 0; t < 3; ++t) (void)a.step(t);
  a.save(dir, {3, data_position_after(s.model, 3), model});
  const auto saved = snapshot(a.state());
  ASSERT_NE(snapshot(b.state()), saved) << "a fresh run already holds the trained state: the check cannot fire";
  const ckpt::CheckpointInfo info = b.load(dir, model);
  EXPECT_EQ(info.step, 3);
  EXPECT_EQ(info.data_position, 3 * s.model.batch);
  EXPECT_EQ(b.optimizer().steps_taken(), 3);
  const auto loaded = snapshot(b.state());
  ASSERT_EQ(loaded.size(), saved.size());
  for (const auto& [name, bytes] : saved) EXPECT_EQ(loaded.at(name), bytes) << name << " differs after the load";
  for (int64_t t = 3; t < s.steps; ++t) {
    const StepRecord<T> ra = a.step(t), rb = b.step(t);
    EXPECT_EQ(std::memcmp(&ra.loss, &rb.loss, sizeof(double)), 0)
        << "step " << t << ": " << ra.loss << " vs " << rb.loss;
  }
  EXPECT_EQ(snapshot(a.state()), snapshot(b.state())) << "the resumed run drifted from the one that never stopped";
}

class RunState : public Scratch {};

// fp16 (issue 48): the loss scaler's scale and growth tracker are saved and restored; a scale
// backed off by the first steps' overflows resumes where it was, and the steps after the load
// skip and scale as the run that never stopped.
TEST_F(RunState, Fp16LossScalerStateIsSavedAndRestored) {
  Scenario s = moe_scenario(OptimKind::adam, DType::f32);
  s.model.set_precision(parse_precision("fp16", ""));
  s.optim.loss_scale.init_scale = 0x1p30, s.optim.loss_scale.growth_interval = 3;
  s.steps = 12;
  const json model = scenario_to_json(s)["model"];
  BaselineRun<float> a(s), b(s);
  for (int64_t t = 0; t < 6; ++t) (void)a.step(t);
  ASSERT_LT(a.scaler().scale, 0x1p30) << "the first steps must have backed the scale off";
  const std::string d = path("fp16");
  a.save(d, {6, data_position_after(s.model, 6), model});
  const auto names = snapshot(a.state());
  EXPECT_EQ(names.count("scaler.scale"), 1u);
  EXPECT_EQ(names.count("scaler.growth_tracker"), 1u);
  (void)b.load(d, model);
  EXPECT_EQ(b.scaler().scale, a.scaler().scale);
  EXPECT_EQ(b.scaler().growth_tracker, a.scaler().growth_tracker);
  for (int64_t t = 6; t < s.steps; ++t) {
    const StepRecord<float> ra = a.step(t), rb = b.step(t);
    EXPECT_EQ(ra.loss_scale, rb.loss_scale) << t;
    EXPECT_EQ(ra.skipped, rb.skipped) << t;
    EXPECT_EQ(ra.loss, rb.loss) << t;
  }
  s.model.set_precision(parse_precision("bf16", ""));  // no scaler, no entries
  BaselineRun<float> c(s);
  EXPECT_EQ(snapshot(c.state()).count("scaler.scale"), 0u);
}

TEST_F(RunState, BaselineAdamFp64SaveLoadIsBitwise) {
  expect_round_trip<double>(moe_scenario(OptimKind::adam, DType::f64), path("adam64"));
}
TEST_F(RunState, BaselineAdamwFp32SaveLoadIsBitwise) {
  expect_round_trip<float>(moe_scenario(OptimKind::adamw, DType::f32), path("adamw32"));
}
TEST_F(RunState, BaselineSgdMomentumSaveLoadIsBitwise) {
  expect_round_trip<double>(moe_scenario(OptimKind::sgd, DType::f64), path("sgd64"));
}

TEST_F(RunState, StateNamesEveryPiece) {
  const Scenario s = moe_scenario(OptimKind::adam, DType::f64);
  BaselineRun<double> run(s);
  std::vector<std::string> names;
  const ckpt::ShardedState st = run.state();
  for (const auto& e : st.entries()) names.push_back(e.name);
  const auto specs = param_specs(s.model);
  EXPECT_EQ(names.size(), 3 * specs.size() + 1 + static_cast<size_t>(s.model.moe_layers()));
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (const auto& p : specs)
    EXPECT_TRUE(has(p.name) && has("optim.m." + p.name) && has("optim.v." + p.name)) << p.name;
  EXPECT_TRUE(has("optim.step"));
  EXPECT_TRUE(has("expert_bias.layers.1"));
  BaselineRun<double> sgd(moe_scenario(OptimKind::sgd, DType::f64));
  const ckpt::ShardedState sgd_st = sgd.state();
  for (const auto& e : sgd_st.entries()) EXPECT_EQ(e.name.rfind("optim.v.", 0), std::string::npos) << e.name;
}

TEST_F(RunState, OtherModelConfigAndMissingMomentsAreRefused) {
  Scenario s = moe_scenario(OptimKind::sgd, DType::f64);
  BaselineRun<double> a(s);
  (void)a.step(0);
  a.save(path("c"), {1, s.model.batch, scenario_to_json(s)["model"]});
  Scenario other = s;
  other.model.mlp_hidden = 64;
  BaselineRun<double> b(other);
  try {
    (void)b.load(path("c"), scenario_to_json(other)["model"]);
    FAIL() << "a checkpoint of another model config was loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("another model config"), std::string::npos) << e.what();
  }
  Scenario adam = s;
  adam.optim.kind = OptimKind::adam;  // needs optim.v.*, which an sgd run never saved
  BaselineRun<double> c(adam);
  EXPECT_THROW((void)c.load(path("c"), scenario_to_json(adam)["model"]), ConfigError);
}

// Issue 26: the run's identity (harness/scenario/scenario.h checkpoint_run) is recorded and a resume
// under another one is refused naming the field; the layout is recorded, not compared; a
// checkpoint saved without it (before it was recorded) is refused, never loaded unchecked.
TEST_F(RunState, AnotherRunIdentityIsRefusedNamingTheField) {
  const Scenario s = moe_scenario(OptimKind::adam, DType::f64);
  const json model = scenario_to_json(s)["model"];
  BaselineRun<double> a(s);
  (void)a.step(0);
  a.save(path("id"), {1, s.model.batch, model, checkpoint_run(s)});
  auto refusal = [&](const Scenario& other) -> std::string {
    BaselineRun<double> b(other);
    try {
      (void)b.load(path("id"), scenario_to_json(other)["model"], checkpoint_run(other));
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "loaded";
  };
  Scenario seed = s, data = s, lr = s, kind = s, beta = s, prec = s, layout = s;
  seed.seed += 1, data.data_seed += 1, lr.optim.lr *= 2, kind.optim.kind = OptimKind::adamw, beta.optim.beta2 = 0.99;
  prec.model.set_precision(parse_precision("fp32", "test"));
  layout.layout.dp_shard = 2, layout.layout.world = 2;
  EXPECT_NE(refusal(seed).find("$.run.seed: the checkpoint was saved by a run with another seed"), std::string::npos)
      << refusal(seed);
  EXPECT_NE(refusal(data).find("$.run.data_seed:"), std::string::npos) << refusal(data);
  EXPECT_NE(refusal(lr).find("$.run.optim.lr:"), std::string::npos) << refusal(lr);
  EXPECT_NE(refusal(kind).find("$.run.optim.kind:"), std::string::npos) << refusal(kind);
  EXPECT_NE(refusal(beta).find("$.run.optim.beta2:"), std::string::npos) << refusal(beta);
  EXPECT_NE(refusal(prec).find("$.run.precision:"), std::string::npos) << refusal(prec);
  EXPECT_EQ(refusal(layout), "loaded") << "a resume under another layout is parity's own check";
  EXPECT_EQ(refusal(s), "loaded");
  // saved without a run identity (a checkpoint of an older build): refused with exit 2
  a.save(path("old"), {1, s.model.batch, model});
  BaselineRun<double> c(s);
  try {
    (void)c.load(path("old"), model, checkpoint_run(s));
    FAIL() << "a checkpoint without $.run was loaded unchecked";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("$.run: missing"), std::string::npos) << e.what();
  }
}

TEST_F(RunState, InconsistentDataPositionIsRefused) {
  const Scenario s = moe_scenario(OptimKind::adam, DType::f64);
  BaselineRun<double> a(s), b(s);
  a.save(path("d"), {2, 5, scenario_to_json(s)["model"]});
  try {
    (void)b.load(path("d"), scenario_to_json(s)["model"]);
    FAIL() << "step 2 with data_position 5 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
  }
}

// ---- the scenario's "resume" object ----

json resume_doc() {
  Scenario s = moe_scenario(OptimKind::adam, DType::f64);
  s.model.batch = 8;
  s.layout.world = 2, s.layout.dp_shard = 2;
  json j = scenario_to_json(s);
  j["resume"] = {{"save_at", 2}, {"layout", {{"world", 4}, {"dp_shard", 2}, {"tp", 2}, {"ep", 2}}}};
  return j;
}

std::string error_of(const json& j) {
  try {
    (void)parse_scenario(j, "x");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ResumeScenario, ReadsAndWritesTheResumeObject) {
  const Scenario s = parse_scenario(resume_doc(), "x");
  ASSERT_TRUE(s.resume.has_value());
  EXPECT_EQ(s.resume->save_at, 2);
  EXPECT_EQ(s.resume->layout.world, 4);
  EXPECT_EQ(s.resume->layout.ep, 2);
  EXPECT_EQ(scenario_to_json(parse_scenario(scenario_to_json(s), "")), scenario_to_json(s));
  EXPECT_FALSE(scenario_to_json(moe_scenario(OptimKind::adam, DType::f64)).contains("resume"));
}

TEST(ResumeScenario, IsReadStrictlyWithJsonPaths) {
  struct Case {
    std::function<void(json&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["resume"]["save_at"] = 5; }, "$.resume.save_at: must be in [1, steps - 1]"},
      {[](json& j) { j["resume"]["save_at"] = 0; }, "$.resume.save_at: must be in [1, steps - 1]"},
      {[](json& j) { j["resume"]["save_at"] = "2"; }, "$.resume.save_at: expected an integer"},
      {[](json& j) { j["resume"].erase("save_at"); }, "$.resume.save_at: required key is missing"},
      {[](json& j) { j["resume"].erase("layout"); }, "$.resume.layout: required key is missing"},
      {[](json& j) { j["resume"]["when"] = 1; }, "$.resume.when: unknown key; allowed keys are: save_at, layout"},
      {[](json& j) { j["resume"]["layout"]["tpp"] = 1; }, "$.resume.layout.tpp: unknown key"},
      {[](json& j) { j["resume"]["layout"]["world"] = 8; }, "$.resume.layout.world: must equal"},
      {[](json& j) { j["resume"]["layout"]["ep"] = 3; }, "$.resume.layout.ep:"},
      {[](json& j) { j["resume"]["layout"] = {{"world", 1}}; }, "$.resume.layout.world: must be >= 2"},
      {[](json& j) { j["resume"] = 3; }, "$.resume: expected an object"},
  };
  for (const auto& c : cases) {
    json j = resume_doc();
    c.edit(j);
    EXPECT_NE(error_of(j).find(c.want), std::string::npos) << "want '" << c.want << "', got '" << error_of(j) << "'";
  }
}

}  // namespace
}  // namespace parity
