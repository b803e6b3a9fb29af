// The rounding twin (harness/runner/twin.h) and the measured bounds (harness/verdict/tolerance.h).
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/tolerance.h"
#include "harness/runner/twin.h"

namespace parity {
namespace {

Scenario tiny_in(const std::string& precision) {
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/tiny.json");
  s.model.set_precision(parse_precision(precision, "test"));
  s.steps = 3;
  return s;
}

// The twin's noise is rounding: above zero (it measured something) and far below a real
// error, in the order of its precision's unit roundoff.
template <class T> std::vector<double> noise_at_step(const Scenario& s, int64_t steps) {
  BaselineRun<T> base(s);
  TwinRun<T> twin(s);
  std::vector<double> n;
  for (int64_t t = 0; t < steps; ++t) {
    const std::vector<Tensor<T>> before = base.model().params.tensors;
    const StepRecord<T> r = base.step(t, KeepGrads::yes);
    n = twin.step(t, r, before, base.model().params.tensors, base.model().expert_bias);
  }
  return n;
}

double largest_grad_noise(const std::vector<double>& n) {
  double m = 0;
  for (size_t f = 0; f < kFamilyCount; ++f) m = std::max(m, n[kNoiseGrad + f]);
  return m;
}

TEST(Twin, NoiseIsRoundingSizedPerPrecision) {
  const std::vector<double> f64 = noise_at_step<double>(tiny_in("fp64"), 2);
  const std::vector<double> f32 = noise_at_step<float>(tiny_in("fp32"), 2);
  const std::vector<double> b16 = noise_at_step<float>(tiny_in("bf16"), 2);
  ASSERT_EQ(f64.size(), kNoiseWidth);
  for (double x : f64) EXPECT_TRUE(std::isfinite(x));
  const double g64 = largest_grad_noise(f64), g32 = largest_grad_noise(f32), g16 = largest_grad_noise(b16);
  EXPECT_GT(g64, 0.0);
  EXPECT_LT(g64, 1e-12);
  EXPECT_GT(g32, 1e3 * g64);
  EXPECT_LT(g32, 1e-4);
  // bf16: a parameter moved one fp32 ulp mostly rounds to the same bf16 copy, so the twin's
  // noise can be below fp32's; the floors (2^-8 / 16) carry the bound there
  EXPECT_GE(g16, 0.0);
  EXPECT_LT(g16, 1e-2);
  EXPECT_LT(noise_floor(parse_precision("bf16", ""), Quantity::gradient), 1e-3);
}

// Issue 41: where flips are few (a 16-bit policy, a step of few values) one twin's sample of them
// can miss what a layout shows; two twins measure there, one elsewhere (fp32 and fp64 have no flips).
TEST(Twin, AStepOfFewValuesUnderA16BitPolicyGetsTwoTwins) {
  const Precision bf16 = parse_precision("bf16", ""), fp16 = parse_precision("fp16", "");
  EXPECT_EQ(twin_count(bf16, 8 * 8 * 16), 2) << "the shipped models' steps: 1024 values";
  EXPECT_EQ(twin_count(fp16, 3 * 8 * 16), 2) << "the smallest zoo scenario's steps: 384 values";
  EXPECT_EQ(twin_count(fp16, kFewestTwinValues + 1), 2);
  // issue 41: under fp16 a tiny step's flips are rare; two twins missed them (tests/scenarios.cmake few_values_fp16_*)
  EXPECT_EQ(twin_count(fp16, 3 * 8 * 4), kTwinsWhereFlipsAreFewest);
  EXPECT_EQ(twin_count(bf16, 3 * 8 * 4), 2) << "bf16 keeps two: no miss measured there";
  EXPECT_EQ(twin_count(parse_precision("bf16-reduce-bf16", ""), kFewTwinValues), 2);
  EXPECT_EQ(twin_count(bf16, kFewTwinValues + 1), 1) << "a large step has many flips";
  EXPECT_EQ(twin_count(parse_precision("fp32", ""), 1024), 1);
  EXPECT_EQ(twin_count(parse_precision("fp64", ""), 16), 1);
}

TEST(Twin, BoundIsTenTimesTheNoiseAboveTheFloor) {
  const Precision p = parse_precision("fp32", "test");
  const double floor = noise_floor(p, Quantity::gradient);
  EXPECT_EQ(measured_bound(p, Quantity::gradient, 0).value, floor);
  EXPECT_FALSE(measured_bound(p, Quantity::gradient, 0).from_twin);
  const Bound b = measured_bound(p, Quantity::gradient, floor);
  EXPECT_TRUE(b.from_twin);
  EXPECT_DOUBLE_EQ(b.value, kTwinFactor * floor);
  EXPECT_EQ(measured_bound(p, Quantity::gradient, NAN).value, floor);
  EXPECT_DOUBLE_EQ(measured_bound(p, Quantity::gradient, 0, 4).value, 8 * floor);  // few elements: sqrt(256 / 4)
  EXPECT_EQ(measured_bound(p, Quantity::gradient, 0, 256).value, floor);
  // fp64 / fp32: the fixed table is the floor, so a measured bound never tightens it
  EXPECT_EQ(noise_floor(parse_precision("fp64", ""), Quantity::gradient),
            tolerance_for(DType::f64, Quantity::gradient).norm_rel);
  EXPECT_EQ(far_bound(0), kFarFloor);
  EXPECT_DOUBLE_EQ(far_bound(0.02), 0.2);
  // Issue 41: the step-local verdict's fp32 floors for the loss and the parameters are one step's
  // rounding (tolerance.cpp step_local_f32), below the trajectory's; fp64, bf16 and the fp32
  // gradients keep theirs.
  const Precision f32 = parse_precision("fp32", ""), b16 = parse_precision("bf16", "");
  EXPECT_EQ(noise_floor(f32, Quantity::loss, true), 2e-6);
  EXPECT_EQ(noise_floor(f32, Quantity::loss, false), 1e-5);
  EXPECT_EQ(noise_floor(f32, Quantity::parameter, true), 1.5e-4);
  EXPECT_EQ(noise_floor(f32, Quantity::parameter, false), 1e-3);
  EXPECT_EQ(noise_floor(f32, Quantity::gradient, true), noise_floor(f32, Quantity::gradient, false));
  EXPECT_EQ(noise_floor(b16, Quantity::parameter, true), noise_floor(b16, Quantity::parameter, false));
  EXPECT_EQ(measured_bound(f32, Quantity::loss, 0, 0, true).floor, 2e-6);
  EXPECT_DOUBLE_EQ(measured_bound(f32, Quantity::loss, 1e-6, 0, true).twin, 1e-5);
}

// Issue 41: a grad row's floor for its model (tolerance.h gradient_row_bound). A family whose
// gradient is far below the model's is held against kDeadGradient x the model's rms; a step of
// few tokens under a 16-bit storage policy gets at least 2^-7 / tokens; nothing else moves.
TEST(Twin, GradientFloorForTheModelDeadFamiliesAndFewTokens) {
  const Precision f32 = parse_precision("fp32", ""), b16 = parse_precision("bf16", "");
  const Bound base = measured_bound(f32, Quantity::gradient, 0, 1024);
  // a family at the model's scale (1024 elements of rms 1 in a model of rms 1): unchanged
  const Bound same = gradient_row_bound(f32, base, {1024, 1024, 4096, 4096, 128});
  EXPECT_EQ(same.value, base.value);
  EXPECT_EQ(same.widened, 1);
  // at 1e-3 of the model's rms (the shipped router's): unchanged
  EXPECT_EQ(gradient_row_bound(f32, base, {1024 * 1e-6, 1024, 4096, 4096, 128}).value, base.value);
  // at 1e-8 of it: widened by kDeadGradient / 1e-8, the floor too, and said so
  const Bound dead = gradient_row_bound(f32, base, {1024 * 1e-16, 1024, 4096, 4096, 128});
  EXPECT_NEAR(dead.value / base.value, kDeadGradient / 1e-8, 1e-6 * kDeadGradient / 1e-8);
  EXPECT_EQ(dead.floor, dead.value);
  EXPECT_GT(dead.widened, 1);
  // exactly zero: the allowed absolute error, floor x kDeadGradient x the model's rms x sqrt(elements)
  EXPECT_DOUBLE_EQ(gradient_row_bound(f32, base, {0, 1024, 4096, 4096, 128}).value,
                   base.value * kDeadGradient * std::sqrt(1024.0));
  // a twin above the widened floor still decides
  Bound loud = base;
  loud.twin = loud.value = 100.0, loud.from_twin = true;
  EXPECT_EQ(gradient_row_bound(f32, loud, {1024 * 1e-16, 1024, 4096, 4096, 128}).value, 100.0);
  EXPECT_TRUE(gradient_row_bound(f32, loud, {1024 * 1e-16, 1024, 4096, 4096, 128}).from_twin);
  // few tokens: bf16 only, 2^-6 / tokens when above the floor
  EXPECT_EQ(few_token_floor(f32, 2), 0);
  EXPECT_DOUBLE_EQ(few_token_floor(b16, 2), 0x1p-7);
  const Bound b = measured_bound(b16, Quantity::gradient, 0, 1024);
  EXPECT_DOUBLE_EQ(gradient_row_bound(b16, b, {1024, 1024, 4096, 4096, 2}).value, 0x1p-7);
  EXPECT_EQ(gradient_row_bound(b16, b, {1024, 1024, 4096, 4096, 128}).value, b.value);  // 2^-13 < u / 16
}

// Issue 41: a saturated softmax (tolerance.h saturation_floor). The compute dtype's ulp of lse, twice, over the
// rms of p - onehot, in every policy; a step that still learns (rms ~ 1) keeps its bound, a saturated one (the
// r38 fp16 case: |logit| 17.67, rms 2.65e-6) gets 1.6 and no far-element measure.
TEST(Twin, SaturatedSoftmaxFloorScalesWithTheLogitsOverTheirGradient) {
  const Precision f16 = parse_precision("fp16", ""), f32 = parse_precision("fp32", "");
  const Precision f64 = parse_precision("fp64", "");
  EXPECT_DOUBLE_EQ(saturation_floor(f16, 16, 1), 4 * 0x1p-24 * 16);  // fp32 compute: u_c, not fp16's u
  EXPECT_DOUBLE_EQ(saturation_floor(f32, 16, 1), 4 * 0x1p-24 * 16);
  EXPECT_DOUBLE_EQ(saturation_floor(f64, 16, 1), 4 * 0x1p-53 * 16);
  EXPECT_EQ(saturation_floor(f16, 0, 1), 0);  // not recorded (parity compare): nothing
  EXPECT_EQ(saturation_floor(f16, 16, 0), 0);  // a zero gradient: the zero family's absolute bound decides
  EXPECT_NEAR(saturation_floor(f16, 17.67, 2.65e-6), 1.59, 0.01);
  const Bound b = measured_bound(f16, Quantity::gradient, 0, 1024);
  GradientScale s{1024, 1024, 4096, 4096, 1, 5, 1};  // one token, logits of 5, p - onehot ~ 1: unchanged
  EXPECT_EQ(gradient_row_bound(f16, b, s).value, gradient_row_bound(f16, b, {1024, 1024, 4096, 4096, 1}).value);
  s.logit_peak = 17.67, s.logit_grad_rms = 2.65e-6;
  const Bound sat = gradient_row_bound(f16, b, s);
  EXPECT_NEAR(sat.value, 1.59, 0.01);
  EXPECT_FALSE(sat.from_twin);
  // the far-element measure: off from kFarRel on
  EXPECT_EQ(saturated_far_bound(0.05, kFarRel / 2), 0.05);
  EXPECT_EQ(saturated_far_bound(0.05, kFarRel), 1.0);
}

}  // namespace
}  // namespace parity
