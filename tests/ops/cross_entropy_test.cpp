#include "ops/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"
#include "core/error.h"

namespace parity::cross_entropy_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::Rng;
using test::zeros;

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1}, {1, 3}, {3, 1}, {3, 5}, {5, 7}, {0, 4}};

std::string shape_name(int64_t n, int64_t V) { return "n=" + std::to_string(n) + " V=" + std::to_string(V); }

TEST(CrossEntropy, ForwardMatchesNaiveFormulaAndReturnsSum) {
  const int64_t n = 4, V = 6;
  Rng rng(20);
  const std::vector<double> logits = rng.vec(n * V, -2.0, 2.0);
  const std::vector<int64_t> targets = rng.indices(n, V);
  std::vector<double> losses = zeros<double>(n);
  const double total = cross_entropy_forward(logits.data(), targets.data(), n, V, losses.data());
  std::vector<double> want(n);
  double want_total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double z = 0.0;  // no max shift: fine for |logits| <= 2
    for (int64_t v = 0; v < V; ++v) z += std::exp(logits[i * V + v]);
    want[i] = -std::log(std::exp(logits[i * V + targets[i]]) / z);
    want_total += losses[i];
  }
  EXPECT_TRUE(test::close_normwise(losses, want, test::Tolerance<double>::rel));
  EXPECT_EQ(total, want_total);  // the returned value is the row-order sum of the losses
}

TEST(CrossEntropy, StableForHugeLogits) {
  // Shifting every logit of a row by a constant leaves the loss unchanged; 1000 would
  // overflow exp() without the max subtraction.
  const int64_t n = 2, V = 3;
  const std::vector<double> base = {0.1, -0.4, 0.7, 2.0, 1.0, -1.0};
  std::vector<double> huge = base;
  for (double& l : huge) l += 1000.0;
  const std::vector<int64_t> targets = {2, 1};
  std::vector<double> lb = zeros<double>(n), lh = zeros<double>(n);
  cross_entropy_forward(base.data(), targets.data(), n, V, lb.data());
  cross_entropy_forward(huge.data(), targets.data(), n, V, lh.data());
  // Rounding base + 1000 moves each logit by <= 1000 * eps64 / 2 ~ 1e-13: within the table.
  EXPECT_TRUE(test::close_normwise(lh, lb, test::Tolerance<double>::rel));
  std::vector<double> dl = zeros<double>(n * V);
  cross_entropy_backward(huge.data(), targets.data(), n, V, 1.0, dl.data());
  for (double g : dl) EXPECT_TRUE(std::isfinite(g));
}

TEST(CrossEntropy, SingleClassHasZeroLossAndGradient) {
  const std::vector<double> logits = {3.0, -7.0};
  const std::vector<int64_t> targets = {0, 0};
  std::vector<double> losses(2, -1.0), dl = zeros<double>(2);
  EXPECT_EQ(cross_entropy_forward(logits.data(), targets.data(), 2, 1, losses.data()), 0.0);
  cross_entropy_backward(logits.data(), targets.data(), 2, 1, 1.0, dl.data());
  EXPECT_EQ(losses, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(dl, (std::vector<double>{0.0, 0.0}));
}

TEST(CrossEntropy, GradientRowsSumToZero) {
  const int64_t n = 3, V = 5;
  Rng rng(21);
  const std::vector<double> logits = rng.vec(n * V);
  const std::vector<int64_t> targets = rng.indices(n, V);
  std::vector<double> dl = zeros<double>(n * V);
  cross_entropy_backward(logits.data(), targets.data(), n, V, 1.0, dl.data());
  for (int64_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (int64_t v = 0; v < V; ++v) s += dl[i * V + v];
    EXPECT_NEAR(s, 0.0, test::kExactAbsTol) << "row " << i;
    EXPECT_LT(dl[i * V + targets[i]], 0.0);
  }
}

TEST(CrossEntropy, BackwardMatchesCentralDifference) {
  for (const auto& [n, V] : kShapes) {
    Rng rng(22);
    std::vector<double> logits = rng.vec(n * V, -2.0, 2.0);
    const std::vector<int64_t> targets = rng.indices(n, V);
    const double c = rng.uniform(0.5, 2.0);  // loss = c * sum of the per-token losses
    auto loss = [&] {
      std::vector<double> losses = zeros<double>(n);
      return c * cross_entropy_forward(logits.data(), targets.data(), n, V, losses.data());
    };
    std::vector<double> dl = zeros<double>(n * V);
    cross_entropy_backward(logits.data(), targets.data(), n, V, c, dl.data());
    EXPECT_TRUE(test::gradient_matches(loss, logits, dl)) << shape_name(n, V);
  }
}

TEST(CrossEntropy, BackwardAccumulates) {
  const int64_t n = 3, V = 5;
  Rng rng(23);
  const std::vector<double> logits = rng.vec(n * V);
  const std::vector<int64_t> targets = rng.indices(n, V);
  EXPECT_TRUE(test::backward_accumulates({n * V}, [&](std::vector<std::vector<double>>& g) {
    cross_entropy_backward(logits.data(), targets.data(), n, V, 0.5, g[0].data());
  }));
}

TEST(CrossEntropy, TargetOutOfRangeThrows) {
  const std::vector<double> logits = {0.0, 1.0};
  std::vector<double> losses(1), dl(2);
  for (int64_t bad : {int64_t{-1}, int64_t{2}}) {
    EXPECT_THROW(cross_entropy_forward(logits.data(), &bad, 1, 2, losses.data()), Error);
    EXPECT_THROW(cross_entropy_backward(logits.data(), &bad, 1, 2, 1.0, dl.data()), Error);
  }
}

template <class T>
std::vector<std::vector<T>> run(const std::vector<double>& logits, const std::vector<int64_t>& targets, int64_t n,
                                int64_t V) {
  const std::vector<T> lt = cast<T>(logits);
  std::vector<T> losses = zeros<T>(n), dl = zeros<T>(n * V);
  const T total = cross_entropy_forward(lt.data(), targets.data(), n, V, losses.data());
  cross_entropy_backward(lt.data(), targets.data(), n, V, T(0.25), dl.data());
  return {losses, dl, {total}};
}

TEST(CrossEntropy, Fp32CloseToFp64) {
  const int64_t n = 5, V = 7;
  Rng rng(24);
  const std::vector<double> logits = test::round_to_f32(rng.vec(n * V, -3.0, 3.0));
  const std::vector<int64_t> targets = rng.indices(n, V);
  const auto f = run<float>(logits, targets, n, V);
  const auto d = run<double>(logits, targets, n, V);
  for (size_t i = 0; i < d.size(); ++i)
    EXPECT_TRUE(test::close_normwise(f[i], d[i], test::Tolerance<float>::rel)) << "output #" << i;
}

}  // namespace
}  // namespace parity::cross_entropy_test
