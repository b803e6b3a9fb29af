// The fp16 policy on one device (issue 48, docs/precision.md "fp16"): a scale high enough to
// overflow the loss's fp16 gradient skips the step (no optimizer step, gradients recorded as
// zeros) and backs the scale off until it fits; the scale then grows after growth_interval steps.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"

namespace parity::fp16_test {
namespace {

Scenario tiny_fp16(double init_scale, int64_t interval) {
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/tiny.json");
  s.model.set_precision(parse_precision("fp16", ""));
  s.optim.loss_scale.init_scale = init_scale, s.optim.loss_scale.growth_interval = interval;
  return s;
}

TEST(Fp16Baseline, AnOverflowingScaleSkipsAndBacksOffUntilTheGradientFits) {
  BaselineRun<float> run(tiny_fp16(0x1p30, 2));
  const Buffer<float> w0 = run.model().params["embed.weight"].data;
  std::vector<double> scales;
  std::vector<bool> skipped;
  for (int64_t t = 0; t < 12; ++t) {
    const StepRecord<float> r = run.step(t, KeepGrads::yes);
    scales.push_back(r.loss_scale), skipped.push_back(r.skipped);
    ASSERT_TRUE(std::isfinite(r.loss));
    if (!r.skipped) continue;
    EXPECT_EQ(r.grad_norm, 0.0) << t;  // a skipped step records zero gradients
    for (const auto& g : r.grads->tensors)
      for (float x : g.data) ASSERT_EQ(x, 0.0f) << t;
  }
  ASSERT_TRUE(skipped[0]) << "2^30 must overflow the loss's fp16 gradient at step 0";
  EXPECT_EQ(scales[0], 0x1p30);
  EXPECT_EQ(scales[1], 0x1p29);  // backed off by 0.5 after the skip
  int64_t first_taken = -1, taken = 0;
  for (size_t t = 0; t < skipped.size(); ++t) {
    if (!skipped[t] && first_taken < 0) first_taken = static_cast<int64_t>(t);
    taken += skipped[t] ? 0 : 1;
    if (t == 0) continue;
    if (skipped[t - 1]) {
      EXPECT_EQ(scales[t], scales[t - 1] / 2) << t;  // backed off
    } else {
      EXPECT_TRUE(scales[t] == scales[t - 1] || scales[t] == 2 * scales[t - 1]) << t;  // kept, or grown
    }
  }
  ASSERT_GT(first_taken, 0) << "the scale must come down to a value that fits";
  EXPECT_EQ(run.optimizer().steps_taken(), taken);  // a skipped step is no optimizer step
  EXPECT_NE(run.model().params["embed.weight"].data, w0);
}

TEST(Fp16Baseline, SkippedStepsLeaveTheParametersAsTheyWere) {
  BaselineRun<float> run(tiny_fp16(0x1p40, 2000));
  const Buffer<float> w0 = run.model().params["layers.0.attn.wq"].data;
  const StepRecord<float> r = run.step(0);
  ASSERT_TRUE(r.skipped);
  EXPECT_EQ(run.model().params["layers.0.attn.wq"].data, w0);
  EXPECT_EQ(run.optimizer().steps_taken(), 0);
  EXPECT_EQ(run.scaler().scale, 0x1p39);
}

TEST(Fp16Baseline, OtherPoliciesNeitherScaleNorSkip) {
  Scenario s = tiny_fp16(0x1p40, 2000);
  s.model.set_precision(parse_precision("bf16", ""));
  BaselineRun<float> run(s);
  const StepRecord<float> r = run.step(0);
  EXPECT_EQ(r.loss_scale, 1.0);
  EXPECT_FALSE(r.skipped);
  EXPECT_EQ(run.optimizer().steps_taken(), 1);
}

TEST(Fp16Scenario, LossScaleKeysReadValidatedAndWrittenOnlyOffTheirDefaults) {
  Scenario s = tiny_fp16(0x1p24, 3);
  nlohmann::json j = scenario_to_json(s);
  EXPECT_EQ(j["precision"], "fp16");
  EXPECT_EQ(j["optim"]["loss_scale"]["init_scale"], 0x1p24);
  EXPECT_EQ(j["optim"]["loss_scale"]["growth_interval"], 3);
  EXPECT_EQ(parse_scenario(j, "t").optim.loss_scale, s.optim.loss_scale);
  s.optim.loss_scale = LossScaleConfig{};
  EXPECT_FALSE(scenario_to_json(s)["optim"].contains("loss_scale"));
  j["optim"]["loss_scale"]["backoff_factor"] = 1.0;
  EXPECT_THROW((void)parse_scenario(j, "t"), ConfigError);
  j["optim"]["loss_scale"]["backoff_factor"] = 0.5;
  j["optim"]["loss_scale"]["growth_interval"] = 0;
  EXPECT_THROW((void)parse_scenario(j, "t"), ConfigError);
  j["optim"]["loss_scale"].erase("growth_interval");
  j["optim"]["loss_scale"]["grow"] = 2;
  EXPECT_THROW((void)parse_scenario(j, "t"), ConfigError);
}

// fp16 on cuda is a scenario like any other since it ran on a GPU (docs/precision.md: every fp16
// scenario passed on an H100, 2026-11-27); before, it was refused naming $.layout.device.
TEST(Fp16Scenario, TheGpuPathTakesFp16) {
  Scenario s = tiny_fp16(65536, 2000);
  nlohmann::json j = scenario_to_json(s);
  j["layout"]["device"] = "cuda";
  const Scenario got = parse_scenario(j, "t");
  EXPECT_EQ(got.layout.device, Device::cuda);
  EXPECT_EQ(got.model.store, Low::fp16);
}

}  // namespace
}  // namespace parity::fp16_test
