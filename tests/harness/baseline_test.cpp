#include <gtest/gtest.h>

#include <cmath>

#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"

namespace parity::baseline_test {  // one namespace per file: the tests build as unity batches
namespace {

Scenario tiny() { return load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/tiny.json"); }

template <class T> void expect_bitwise_reproducible(Scenario s) {
  BaselineRun<T> a(s), b(s);
  for (int64_t t = 0; t < 3; ++t) {
    auto ra = a.step(t, KeepGrads::yes), rb = b.step(t, KeepGrads::yes);
    ASSERT_EQ(ra.loss, rb.loss) << "step " << t;
    ASSERT_EQ(ra.grad_norm, rb.grad_norm);
    ASSERT_EQ(ra.chosen, rb.chosen);
  }
  for (size_t p = 0; p < a.model().params.size(); ++p)
    ASSERT_EQ(a.model().params.tensors[p].data, b.model().params.tensors[p].data) << a.model().params.specs[p].name;
  ASSERT_EQ(a.model().expert_bias, b.model().expert_bias);
}

TEST(Baseline, SameScenarioTwiceIsBitwiseIdentical) {
  Scenario s = tiny();
  expect_bitwise_reproducible<double>(s);
  s.model.dtype = DType::f32;
  expect_bitwise_reproducible<float>(s);
}

TEST(Baseline, TokensPerExpertCountsEveryAssignmentOnce) {
  Scenario s = tiny();
  BaselineRun<double> run(s);
  auto r = run.step(0);
  ASSERT_EQ(r.tokens_per_expert.size(), static_cast<size_t>(s.model.moe_layers()));
  for (const auto& c : r.tokens_per_expert) {
    int64_t total = 0;
    for (int64_t x : c) total += x;
    EXPECT_EQ(total, s.model.batch * s.model.seq * s.model.top_k);
  }
  double sum = 0;
  for (double l : r.micro_losses) sum += l;
  EXPECT_NEAR(sum, r.loss, 1e-15);
}

TEST(Baseline, ClippingScalesTheUpdate) {
  Scenario s = tiny();
  s.optim.kind = OptimKind::sgd, s.optim.lr = 1.0, s.optim.clip = 1e-3;
  BaselineRun<double> clipped(s);
  s.optim.clip = 0;
  BaselineRun<double> free(s);
  Buffer<double> w0 = free.model().params["embed.weight"].data;
  auto rc = clipped.step(0), rf = free.step(0);
  EXPECT_EQ(rf.clip_coef, 1.0);
  EXPECT_DOUBLE_EQ(rc.clip_coef, 1e-3 / (rc.grad_norm + 1e-6));
  const auto& wc = clipped.model().params["embed.weight"].data;
  const auto& wf = free.model().params["embed.weight"].data;
  for (size_t i = 0; i < w0.size(); i += 7) EXPECT_NEAR(wc[i] - w0[i], rc.clip_coef * (wf[i] - w0[i]), 1e-15);
}

// "Done when": 200 adam steps on the tiny scenario take the loss from about ln V toward
// the data's entropy floor.
TEST(Baseline, TinyLossFallsTowardTheEntropyFloor) {
  Scenario s = tiny();
  BaselineRun<double> run(s);
  const double lnv = std::log(static_cast<double>(s.model.vocab)), floor = run.data().entropy_floor();
  double first = 0, last10 = 0;
  for (int64_t t = 0; t < 200; ++t) {
    double ce = run.step(t).ce;
    if (t == 0) first = ce;
    if (t >= 190) last10 += ce / 10;
  }
  EXPECT_NEAR(first, lnv, 0.1);
  EXPECT_GT(last10, floor);
  EXPECT_LT(last10 - floor, 0.5 * (lnv - floor)) << "first " << first << " last " << last10 << " floor " << floor;
}

}  // namespace
}  // namespace parity::baseline_test
