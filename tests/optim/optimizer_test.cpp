// Each optimizer step against its formula written out independently, clipping, the bias update.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/optimizer.h"

namespace parity {
namespace {

std::vector<ParamSpec> one_param(int64_t n) { return {{"p", {n}, Family::embedding, 0.02}}; }

ParamSet<double> set_of(std::vector<double> v) {
  ParamSet<double> s = ParamSet<double>::zeros(one_param(static_cast<int64_t>(v.size())));
  s.tensors[0].data = to_buffer(v);
  return s;
}

TEST(Optimizer, SgdMomentumBufferStartsAtTheGradient) {
  OptimConfig c;
  c.kind = OptimKind::sgd, c.lr = 0.5, c.momentum = 0.9;
  Optimizer<double> opt(c, one_param(2));
  ParamSet<double> w = set_of({1.0, -2.0}), g = set_of({0.25, 1.0});
  opt.step(w, g);  // buf = g
  EXPECT_EQ(w.tensors[0].data, (std::vector<double>{1.0 - 0.125, -2.0 - 0.5}));
  g = set_of({1.0, 0.0});
  opt.step(w, g);  // buf = 0.9 * buf + g
  EXPECT_DOUBLE_EQ(w.tensors[0].data[0], 0.875 - 0.5 * (0.9 * 0.25 + 1.0));
  EXPECT_DOUBLE_EQ(w.tensors[0].data[1], -2.5 - 0.5 * (0.9 * 1.0));
}

TEST(Optimizer, AdamFirstStepMovesEachWeightByLrTimesSign) {
  OptimConfig c;
  c.kind = OptimKind::adam, c.lr = 0.01, c.eps = 1e-8;
  Optimizer<double> opt(c, one_param(3));
  ParamSet<double> w = set_of({1.0, 1.0, 1.0}), g = set_of({3.0, -0.5, 0.0});
  opt.step(w, g);
  // bias-corrected m / sqrt(v) = g / |g| on the first step
  EXPECT_NEAR(w.tensors[0].data[0], 1.0 - 0.01, 1e-10);
  EXPECT_NEAR(w.tensors[0].data[1], 1.0 + 0.01, 1e-9);
  EXPECT_EQ(w.tensors[0].data[2], 1.0);
}

TEST(Optimizer, AdamMatchesItsFormulaOverSeveralSteps) {
  for (OptimKind kind : {OptimKind::adam, OptimKind::adamw}) {
    OptimConfig c;
    c.kind = kind, c.lr = 0.1, c.beta1 = 0.8, c.beta2 = 0.9, c.eps = 1e-3, c.weight_decay = 0.05;
    Optimizer<double> opt(c, one_param(1));
    ParamSet<double> w = set_of({0.7});
    double x = 0.7, m = 0, v = 0;
    const double grads[] = {0.3, -1.2, 0.05, 2.0};
    for (int t = 1; t <= 4; ++t) {
      double gi = grads[t - 1];
      ParamSet<double> g = set_of({gi});
      opt.step(w, g);
      if (kind == OptimKind::adamw) x -= c.lr * c.weight_decay * x;
      else gi += c.weight_decay * x;
      m = c.beta1 * m + (1 - c.beta1) * gi;
      v = c.beta2 * v + (1 - c.beta2) * gi * gi;
      x -= c.lr * (m / (1 - std::pow(c.beta1, t))) / (std::sqrt(v / (1 - std::pow(c.beta2, t))) + c.eps);
      EXPECT_NEAR(w.tensors[0].data[0], x, 1e-15) << optim_name(kind) << " step " << t;
    }
  }
}

TEST(Optimizer, AdamwDecaysWithoutTouchingTheMoments) {
  OptimConfig c;
  c.kind = OptimKind::adamw, c.lr = 0.1, c.weight_decay = 0.5;
  Optimizer<double> opt(c, one_param(1));
  ParamSet<double> w = set_of({2.0}), g = set_of({0.0});
  opt.step(w, g);
  EXPECT_DOUBLE_EQ(w.tensors[0].data[0], 2.0 * (1 - 0.05));
  EXPECT_EQ(opt.first_moment().tensors[0].data[0], 0.0);
}

TEST(Optimizer, StepBufferOnSlicesEqualsTheFullStep) {
  OptimConfig c;
  c.kind = OptimKind::adam, c.lr = 0.01;
  Optimizer<double> full(c, one_param(5)), sliced(c, one_param(5));
  ParamSet<double> w = set_of({1, 2, 3, 4, 5}), g = set_of({0.1, -0.2, 0.3, -0.4, 0.5});
  ParamSet<double> w2 = w, m = set_of({0, 0, 0, 0, 0}), v = m;
  full.step(w, g);
  sliced.begin_step();
  sliced.step_buffer(w2.tensors[0].ptr(), g.tensors[0].ptr(), m.tensors[0].ptr(), v.tensors[0].ptr(), 2);
  sliced.step_buffer(w2.tensors[0].ptr() + 2, g.tensors[0].ptr() + 2, m.tensors[0].ptr() + 2, v.tensors[0].ptr() + 2,
                     3);
  EXPECT_EQ(w.tensors[0].data, w2.tensors[0].data);
}

TEST(Clipping, CoefficientAndNorm) {
  ParamSet<double> g = set_of({3.0, 4.0});
  EXPECT_EQ(sum_of_squares(g), 25.0);
  EXPECT_EQ(clip_coefficient(5.0, 0.0), 1.0);   // off
  EXPECT_EQ(clip_coefficient(5.0, 10.0), 1.0);  // below the bound
  EXPECT_DOUBLE_EQ(clip_coefficient(5.0, 1.0), 1.0 / (5.0 + 1e-6));
  scale_grads(g, 0.5);
  EXPECT_EQ(g.tensors[0].data, (std::vector<double>{1.5, 2.0}));
}

TEST(ExpertBias, UpdateFollowsSignOfTheLoadGapAndHasZeroMean) {
  std::vector<double> bias(4, 0.0);
  std::vector<int64_t> counts{4, 0, 2, 2};  // mean 2
  expert_bias_update(bias.data(), counts.data(), 4, 0.1);
  EXPECT_EQ(bias, (std::vector<double>{-0.1, 0.1, 0.0, 0.0}));
  std::vector<double> b2(4, 0.0);
  std::vector<int64_t> c2{3, 1, 1, 1};  // mean 1.5: d = (-u, u, u, u), mean(d) = u/2
  expert_bias_update(b2.data(), c2.data(), 4, 0.1);
  EXPECT_NEAR(b2[0], -0.15, 1e-16);
  for (int e = 1; e < 4; ++e) EXPECT_NEAR(b2[static_cast<size_t>(e)], 0.05, 1e-16);
  std::vector<double> b3(4, 1.0);
  expert_bias_update(b3.data(), c2.data(), 4, 0.0);  // off
  EXPECT_EQ(b3, std::vector<double>(4, 1.0));
}

}  // namespace
}  // namespace parity
