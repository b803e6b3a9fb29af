// The update a gradient explains (harness/runner/verdict_taken.h explained_update), against
// Adam's and sgd's update written out here from their definitions (docs/design/model.md), not
// through optim/.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "ckpt/checkpoint.h"
#include "core/precision.h"
#include "harness/runner/verdict_taken.h"
#include "mesh/layout_config.h"
#include "mesh/mesh.h"
#include "optim/optimizer.h"

namespace parity::verdict_taken_test {  // one namespace per file: the tests build as unity batches
namespace {

OptimConfig adam(double eps) {
  OptimConfig o;
  o.kind = OptimKind::adam;
  o.lr = 1e-3, o.beta1 = 0.9, o.beta2 = 0.999, o.eps = eps, o.weight_decay = 0;
  return o;
}

// Adam's step t from moments (m, v) and gradient g: the parameter's change.
double adam_change(const OptimConfig& o, int t, double m, double v, double g) {
  m = o.beta1 * m + (1 - o.beta1) * g;
  v = o.beta2 * v + (1 - o.beta2) * g * g;
  const double mh = m / (1 - std::pow(o.beta1, t)), vh = v / (1 - std::pow(o.beta2, t));
  return -o.lr * mh / (std::sqrt(vh) + o.eps);
}

TEST(ExplainedUpdate, TheSameGradientAndMomentsExplainNothing) {
  const OptimConfig o = adam(1e-8);
  const auto c = step_constants<double>(o, 3);
  const auto x = verdict_taken::explained_update<double>(c, 0.25, 1e-3, 1e-6, 2e-3, 1e-3, 1e-6, 2e-3);
  EXPECT_EQ(x.dw, 0.0);
}

// An element whose gradient sits near eps: at step 1 Adam moves it by lr g / (|g| + eps), so a
// gradient of 1.0e-8 against 1.3e-8 (a difference no family's bound would see) moves it by
// 0.065 lr; far from eps (1e-3 against 1.3e-3) the same ratio moves it by 2.3e-6 lr.
TEST(ExplainedUpdate, AdamNearEpsTurnsATinyGradientDifferenceIntoAFractionOfLr) {
  const OptimConfig o = adam(1e-8);
  const auto c = step_constants<double>(o, 1);
  const double w0 = 0.5;
  const auto near = verdict_taken::explained_update<double>(c, w0, 0, 0, 1.0e-8, 0, 0, 1.3e-8);
  const double want = adam_change(o, 1, 0, 0, 1.0e-8) - adam_change(o, 1, 0, 0, 1.3e-8);
  EXPECT_NEAR(near.dw, want, 1e-15);
  EXPECT_NEAR(std::abs(near.dw) / o.lr, 1.3 / 2.3 - 0.5, 1e-6);
  const auto far = verdict_taken::explained_update<double>(c, w0, 0, 0, 1.0e-3, 0, 0, 1.3e-3);
  EXPECT_LT(std::abs(far.dw), 1e-5 * o.lr);  // 1e-8 / 1e-3 - 1e-8 / 1.3e-3
  // the baseline's moments after its step: its replay
  EXPECT_NEAR(near.m, (1 - o.beta1) * 1.3e-8, 1e-22);
  EXPECT_NEAR(near.v, (1 - o.beta2) * 1.3e-8 * 1.3e-8, 1e-30);
}

// Moments that differ (the layout's carried from gradients it took earlier) explain the update
// they give: the layout steps from its own, the baseline from its replay.
TEST(ExplainedUpdate, MomentsLeftByEarlierGradientsAreExplained) {
  const OptimConfig o = adam(1e-8);
  const auto c = step_constants<double>(o, 2);
  const double m_layout = 1e-9, v_layout = 1e-18, m_base = 1.3e-9, v_base = 1.69e-18, g = 2e-9;
  const auto x = verdict_taken::explained_update<double>(c, 0.5, m_layout, v_layout, g, m_base, v_base, g);
  const double want = adam_change(o, 2, m_layout, v_layout, g) - adam_change(o, 2, m_base, v_base, g);
  EXPECT_NEAR(x.dw, want, 1e-15);
  EXPECT_GT(std::abs(x.dw), 1e-3 * o.lr);
}

// sgd is linear: the explained update is lr x the gradients' difference, momentum included.
TEST(ExplainedUpdate, SgdIsLrTimesTheDifference) {
  OptimConfig o;
  o.kind = OptimKind::sgd, o.lr = 0.01, o.momentum = 0.9;
  const auto c = step_constants<double>(o, 4);
  const auto x = verdict_taken::explained_update<double>(c, 1.0, 0.5, 0, 0.25, 0.5, 0, 0.125);
  EXPECT_NEAR(x.dw, -0.01 * (0.25 - 0.125), 1e-16);
  EXPECT_NEAR(x.m, 0.9 * 0.5 + 0.125, 1e-16);
}

// The element step the verdict replays is the optimizer's own: the same bits as step_buffer.
TEST(ExplainedUpdate, StepConstantsApplyIsTheOptimizersStep) {
  for (OptimKind k : {OptimKind::sgd, OptimKind::adam, OptimKind::adamw}) {
    OptimConfig o = adam(1e-8);
    o.kind = k, o.momentum = 0.9, o.weight_decay = 0.01;
    Optimizer<float> opt(o, {});
    opt.set_steps(2);
    opt.begin_step();
    std::vector<float> w{0.5f, -0.25f, 1e-3f}, g{1e-8f, 3e-2f, -2e-5f}, m{1e-9f, 2e-3f, -1e-6f};
    std::vector<float> v{1e-18f, 1e-6f, 4e-12f};
    std::vector<float> w2 = w, m2 = m, v2 = v;
    opt.step_buffer(w.data(), g.data(), m.data(), k == OptimKind::sgd ? nullptr : v.data(), 3);
    const auto c = step_constants<float>(o, 3);
    for (size_t i = 0; i < 3; ++i) {
      c.apply(w2[i], g[i], m2[i], &v2[i]);
      EXPECT_EQ(w[i], w2[i]);
      EXPECT_EQ(m[i], m2[i]);
    }
  }
}


// The replay of the baseline's moments goes on only where the layout's moments before a step are
// what its own step left: written wrong after an update, or changed between steps, they start the
// replay from the layout's own, and what they do to the update stays unexplained.
struct OneParam {
  std::vector<ParamSpec> specs{{"w", Shape{4}, Family::head}};
  Tensor<double> m{Shape{4}}, v{Shape{4}};
  Tensor<int64_t> count{Shape{}, std::vector<int64_t>{0}};
  ckpt::ShardedState st;
  std::vector<Tensor<double>> w0{Tensor<double>(Shape{4}, std::vector<double>{0.5, -0.5, 0.25, 1.0})};
  OneParam() {
    st.add("optim.m.w", Shape{4}, mesh::replicated(mesh::View::dense), m);
    st.add("optim.v.w", Shape{4}, mesh::replicated(mesh::View::dense), v);
    st.add("optim.step", Shape{}, mesh::replicated(mesh::View::dense), count);
  }
  // the layout's optimizer: one step of its own from g
  void step_layout(const OptimConfig& o, const std::vector<double>& g) {
    const auto c = step_constants<double>(o, count.data[0] + 1);
    for (size_t i = 0; i < 4; ++i) {
      double w = w0[0].data[i];
      c.apply(w, g[i], m.data[i], &v.data[i]);
    }
    ++count.data[0];
  }
  // the explained update's sum of squares of this step (append_sums' seventh)
  double explained(verdict_taken::Moments& mo, const mesh::Mesh& mesh, const OptimConfig& o,
                   const std::vector<double>& g, const std::vector<double>& r) {
    const std::vector<Tensor<double>> adam_v{v};  // the optimizer's own second moment
    verdict_taken::before_step<double>(mo, st, specs, mesh, 0, &adam_v);
    step_layout(o, g);
    std::vector<Tensor<double>> base{Tensor<double>(Shape{4}, r)};
    std::vector<double> out;
    verdict_taken::append_sums<double>(mo, st, specs, o, 1.0, base, w0, w0, {0}, 1, out);
    return out.at(6);
  }
};

TEST(ExplainedUpdate, MomentsChangedBetweenStepsAreNotExplained) {
  LayoutConfig l;
  const mesh::Mesh mesh(l);
  const OptimConfig o = adam(1e-8);
  const std::vector<double> g1{1e-8, 2e-8, 3e-3, -1e-8}, r1{1.3e-8, 2e-8, 3e-3, -0.7e-8}, g2{1e-9, -1e-8, 2e-3, 5e-9};
  // carried: step 2's difference is its moments' (left by step 1's gradients), and it is explained
  OneParam a;
  verdict_taken::Moments ma;
  a.explained(ma, mesh, o, g1, r1);
  const double carried = a.explained(ma, mesh, o, g2, g2);
  EXPECT_GT(std::sqrt(carried), 1e-3 * o.lr);
  // the same, with v doubled between the steps: the replay starts from the layout's own, and
  // the same gradient explains nothing
  OneParam b;
  verdict_taken::Moments mb;
  b.explained(mb, mesh, o, g1, r1);
  for (double& x : b.v.data) x *= 2;
  EXPECT_EQ(b.explained(mb, mesh, o, g2, g2), 0.0);
  // and an m moved by one part in 1e3
  OneParam c;
  verdict_taken::Moments mc;
  c.explained(mc, mesh, o, g1, r1);
  for (double& x : c.m.data) x *= 1.001;
  EXPECT_EQ(c.explained(mc, mesh, o, g2, g2), 0.0);
}


// Under a 16-bit reduction (verdict_taken.h Held) the gradient the optimizer took is held to the one
// the rank holds times its clip coefficient: in fp32, every element within its bound (T's roundings of
// the optimizer's arithmetic, Adam with L2 weight decay, three steps) where the optimizer's own step
// took it; a first moment rounded to bf16 after the step (the zoo's optim_state_in_bf16), or a gradient
// the optimizer took unclipped, puts most elements past it.
struct HeldParam {
  static constexpr size_t kN = 256;
  std::vector<ParamSpec> specs{{"w", Shape{kN}, Family::head}};
  Tensor<float> m{Shape{kN}}, v{Shape{kN}};
  Tensor<int64_t> count{Shape{}, std::vector<int64_t>{0}};
  ckpt::ShardedState st;
  std::vector<Tensor<float>> w0{Tensor<float>(Shape{kN})}, g{Tensor<float>(Shape{kN})};
  std::vector<std::vector<int64_t>> idx{std::vector<int64_t>(kN)};
  HeldParam() {
    st.add("optim.m.w", Shape{kN}, mesh::replicated(mesh::View::dense), m);
    st.add("optim.v.w", Shape{kN}, mesh::replicated(mesh::View::dense), v);
    st.add("optim.step", Shape{}, mesh::replicated(mesh::View::dense), count);
    for (size_t i = 0; i < kN; ++i) {  // magnitudes from 1e-9 to 1e-1, both signs; held in reverse order
      const double s = (i % 3 == 0 ? -1.0 : 1.0) * std::pow(10.0, -9.0 + 8.0 * static_cast<double>(i % 17) / 16);
      w0[0].data[i] = static_cast<float>(0.5 - static_cast<double>(i) / kN);
      g[0].data[kN - 1 - i] = static_cast<float>(s * (1 + 0.37 * static_cast<double>(i % 5)));
      idx[0][kN - 1 - i] = static_cast<int64_t>(i);
    }
  }
  // one step: the optimizer takes the held gradient (times coef where `clipped`), then `after` acts on
  // its moments; returns append_sums' sums (diff2, ref2, dot, far, count, bound2, ...)
  template <class After>
  std::vector<double> step(verdict_taken::Moments& mo, const mesh::Mesh& mesh, const OptimConfig& o, double coef,
                           bool clipped, After after) {
    const std::vector<Tensor<float>> adam_v{v};
    verdict_taken::before_step<float>(mo, st, specs, mesh, 0, &adam_v);
    const auto c = step_constants<float>(o, count.data[0] + 1);
    for (size_t k = 0; k < kN; ++k) {
      const auto i = static_cast<size_t>(idx[0][k]);
      float w = w0[0].data[i], gi = g[0].data[k];
      if (clipped) gi = gi * static_cast<float>(coef);
      c.apply(w, gi, m.data[i], &v.data[i]);
    }
    ++count.data[0];
    after(m);
    std::vector<Tensor<float>> base{Tensor<float>(Shape{kN})};  // the baseline's gradient: not read here
    const verdict_taken::Held<float> held{&g, &idx, coef};
    std::vector<double> out;
    verdict_taken::append_sums<float>(mo, st, specs, o, coef, base, w0, w0, {0}, 1, out, nullptr, &held);
    return out;
  }
};

TEST(TakenAgainstHeld, TheOptimizersOwnStepIsWithinItsBound) {
  const mesh::Mesh mesh{LayoutConfig{}};
  OptimConfig o = adam(1e-8);
  o.weight_decay = 0.01;  // L2: the moment takes wd w beside the gradient
  HeldParam a;
  verdict_taken::Moments mo;
  for (int t = 0; t < 3; ++t) {
    const auto s = a.step(mo, mesh, o, 0.7, true, [](Tensor<float>&) {});
    EXPECT_EQ(s.at(3), 0.0) << "step " << t;
    EXPECT_EQ(s.at(4), static_cast<double>(HeldParam::kN));
    EXPECT_LE(std::sqrt(s.at(0)), std::sqrt(s.at(5)));
    EXPECT_GT(s.at(1), 0.0);
  }
}

TEST(TakenAgainstHeld, AMomentRoundedToBf16OrAGradientLeftUnclippedIsPastIt) {
  const mesh::Mesh mesh{LayoutConfig{}};
  const OptimConfig o = adam(1e-8);
  HeldParam a;
  verdict_taken::Moments ma;
  const auto bf16 = [](Tensor<float>& m) { round_to(Low::bf16, m.ptr(), m.numel()); };
  const auto s = a.step(ma, mesh, o, 0.7, true, bf16);
  EXPECT_GT(s.at(3), 0.5 * HeldParam::kN);
  EXPECT_GT(std::sqrt(s.at(0)), 100 * std::sqrt(s.at(5)));
  HeldParam b;
  verdict_taken::Moments mb;
  const auto u = b.step(mb, mesh, o, 0.7, false, [](Tensor<float>&) {});
  EXPECT_EQ(u.at(3), static_cast<double>(HeldParam::kN));
}

// Held::taken lays the rank's gradient out by global index: NaN where it holds none.
TEST(TakenAgainstHeld, HeldIsReadByGlobalIndex) {
  const std::vector<Tensor<float>> g{Tensor<float>(Shape{2}, std::vector<float>{3.0f, 5.0f})};
  const std::vector<std::vector<int64_t>> idx{{3, 1}};
  const verdict_taken::Held<float> h{&g, &idx, 0.5};
  const std::vector<double> x = h.taken(0, 4);
  EXPECT_TRUE(std::isnan(x[0]) && std::isnan(x[2]));
  EXPECT_EQ(x[3], 1.5);
  EXPECT_EQ(x[1], 2.5);
}

}  // namespace
}  // namespace parity::verdict_taken_test
