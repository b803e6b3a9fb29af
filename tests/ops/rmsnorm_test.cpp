#include "ops/rmsnorm.h"

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
#include "ops/norm.h"

namespace parity::rmsnorm_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::dot;
using test::Rng;
using test::zeros;

// No D = 1 (LayerNorm's test has it): there y = w·x / sqrt(x² + eps) is ±w up to 1e-5, and dy/dx,
// about eps / |x|³ ~ 7e-5 here, sits below what a central difference of a loss of size 1 resolves
// in fp64 (rounding 1e-16 / h 1e-6: measured relative error 1.2e-6 and 3.0e-6 at n = 1 and 3).
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 2}, {3, 2}, {1, 3}, {3, 7}, {5, 5}, {0, 3}, {2, 0}};

std::string shape_name(int64_t n, int64_t D) { return "n=" + std::to_string(n) + " D=" + std::to_string(D); }

TEST(RmsNorm, UnitWeightGivesMeanSquareOne) {
  const int64_t n = 4, D = 7;
  Rng rng(20);
  const std::vector<double> x = rng.vec(n * D, -3.0, 5.0), w(D, 1.0);
  std::vector<double> y = zeros<double>(n * D), rstd = zeros<double>(n);
  rmsnorm_forward(x.data(), w.data(), n, D, y.data(), rstd.data());
  for (int64_t i = 0; i < n; ++i) {
    double sx = 0.0, sy = 0.0;  // independent: reverse order
    for (int64_t d = D - 1; d >= 0; --d) sx += x[i * D + d] * x[i * D + d], sy += y[i * D + d] * y[i * D + d];
    const double msx = sx / D, msy = sy / D;
    // mean square 1 up to the eps: msx / (msx + eps)
    EXPECT_NEAR(msy, msx / (msx + kRmsNormEps), test::kExactAbsTol) << "row " << i;
    EXPECT_NEAR(rstd[i], 1.0 / std::sqrt(msx + kRmsNormEps), test::kExactAbsTol);
  }
}

TEST(RmsNorm, WeightMatchesFormulaAndIsNotCentred) {
  const int64_t n = 3, D = 5;
  Rng rng(21);
  std::vector<double> x = rng.vec(n * D), w = rng.vec(D);
  for (auto& v : x) v += 2.0;  // a mean far from 0: a centring norm would give other values
  std::vector<double> y = zeros<double>(n * D), rstd = zeros<double>(n);
  rmsnorm_forward(x.data(), w.data(), n, D, y.data(), rstd.data());
  std::vector<double> want(n * D);
  for (int64_t i = 0; i < n; ++i) {
    double ms = 0.0;
    for (int64_t d = D - 1; d >= 0; --d) ms += x[i * D + d] * x[i * D + d];
    ms /= D;
    for (int64_t d = 0; d < D; ++d) want[i * D + d] = w[d] * x[i * D + d] / std::sqrt(ms + 1e-5);
  }
  EXPECT_TRUE(test::close_normwise(y, want, test::Tolerance<double>::rel));
}

TEST(RmsNorm, BackwardMatchesCentralDifference) {
  for (const auto& [n, D] : kShapes) {
    Rng rng(22);
    std::vector<double> x = rng.vec(n * D), w = rng.vec(D, 0.5, 1.5);
    const std::vector<double> r = rng.vec(n * D);  // loss = <r, y>
    std::vector<double> y = zeros<double>(n * D), rstd = zeros<double>(n);
    auto loss = [&] {
      rmsnorm_forward(x.data(), w.data(), n, D, y.data(), rstd.data());
      return dot(r, y);
    };
    loss();
    std::vector<double> dx = zeros<double>(n * D), dw = zeros<double>(D);
    rmsnorm_backward(x.data(), w.data(), rstd.data(), r.data(), n, D, dx.data(), dw.data());
    EXPECT_TRUE(test::gradient_matches(loss, x, dx)) << shape_name(n, D) << " dx";
    EXPECT_TRUE(test::gradient_matches(loss, w, dw)) << shape_name(n, D) << " dw";
  }
}

TEST(RmsNorm, BackwardAccumulates) {
  const int64_t n = 3, D = 5;
  Rng rng(23);
  const std::vector<double> x = rng.vec(n * D), w = rng.vec(D), dy = rng.vec(n * D);
  std::vector<double> y = zeros<double>(n * D), rstd = zeros<double>(n);
  rmsnorm_forward(x.data(), w.data(), n, D, y.data(), rstd.data());
  EXPECT_TRUE(test::backward_accumulates({n * D, D}, [&](std::vector<std::vector<double>>& g) {
    rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), n, D, g[0].data(), g[1].data());
  }));
}

// The dispatch: each kind is its op, bit for bit; RMSNorm reads no bias and writes no mean.
TEST(RmsNorm, NormDispatchRunsTheChosenOp) {
  const int64_t n = 3, D = 4;
  Rng rng(24);
  const std::vector<double> x = rng.vec(n * D), w = rng.vec(D), b = rng.vec(D), dy = rng.vec(n * D);
  std::vector<double> y1 = zeros<double>(n * D), r1 = zeros<double>(n), y2 = y1, r2 = r1, m2 = r1;
  rmsnorm_forward(x.data(), w.data(), n, D, y1.data(), r1.data());
  norm_forward<double>(NormKind::rmsnorm, x.data(), w.data(), nullptr, n, D, y2.data(), nullptr, r2.data());
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(r1, r2);
  std::vector<double> dx1 = zeros<double>(n * D), dw1 = zeros<double>(D), dx2 = dx1, dw2 = dw1;
  rmsnorm_backward(x.data(), w.data(), r1.data(), dy.data(), n, D, dx1.data(), dw1.data());
  norm_backward<double>(NormKind::rmsnorm, x.data(), w.data(), nullptr, r2.data(), dy.data(), n, D, dx2.data(),
                        dw2.data(), nullptr);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dw1, dw2);
  std::vector<double> y3 = zeros<double>(n * D), y4 = y3, m3 = r1, r3 = r1, m4 = r1, r4 = r1;
  layernorm_forward(x.data(), w.data(), b.data(), n, D, y3.data(), m3.data(), r3.data());
  norm_forward(NormKind::layernorm, x.data(), w.data(), b.data(), n, D, y4.data(), m4.data(), r4.data());
  EXPECT_EQ(y3, y4);
  EXPECT_NE(y1, y3);
}

// Forward outputs and gradients of one run in dtype T: {y, rstd, dx, dw}.
template <class T>
std::vector<std::vector<T>> run(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& dy, int64_t n, int64_t D) {
  const std::vector<T> xt = cast<T>(x), wt = cast<T>(w), dyt = cast<T>(dy);
  std::vector<T> y = zeros<T>(n * D), rstd = zeros<T>(n), dx = zeros<T>(n * D), dw = zeros<T>(D);
  rmsnorm_forward(xt.data(), wt.data(), n, D, y.data(), rstd.data());
  rmsnorm_backward(xt.data(), wt.data(), rstd.data(), dyt.data(), n, D, dx.data(), dw.data());
  return {y, rstd, dx, dw};
}

TEST(RmsNorm, Fp32CloseToFp64) {
  const int64_t n = 5, D = 7;
  Rng rng(25);
  const auto x = test::round_to_f32(rng.vec(n * D)), w = test::round_to_f32(rng.vec(D));
  const auto dy = test::round_to_f32(rng.vec(n * D));
  const auto f = run<float>(x, w, dy, n, D);
  const auto d = run<double>(x, w, dy, n, D);
  for (size_t i = 0; i < d.size(); ++i)
    EXPECT_TRUE(test::close_normwise(f[i], d[i], test::Tolerance<float>::rel)) << "output #" << i;
}

}  // namespace
}  // namespace parity::rmsnorm_test
