#include "ops/layernorm.h"

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

namespace parity::layernorm_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::dot;
using test::Rng;
using test::zeros;

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1}, {3, 1}, {1, 3}, {3, 7}, {5, 5}, {0, 3}, {2, 0}};

std::string shape_name(int64_t n, int64_t D) { return "n=" + std::to_string(n) + " D=" + std::to_string(D); }

TEST(LayerNorm, UnitAffineGivesMeanZeroAndVarianceOne) {
  const int64_t n = 4, D = 7;
  Rng rng(10);
  const std::vector<double> x = rng.vec(n * D, -3.0, 5.0);
  const std::vector<double> w(D, 1.0), b(D, 0.0);
  std::vector<double> y = zeros<double>(n * D), mean = zeros<double>(n), rstd = zeros<double>(n);
  layernorm_forward(x.data(), w.data(), b.data(), n, D, y.data(), mean.data(), rstd.data());
  for (int64_t i = 0; i < n; ++i) {
    // Independent two-pass statistics of x and of y.
    double mx = 0.0, my = 0.0;
    for (int64_t d = 0; d < D; ++d) mx += x[i * D + d], my += y[i * D + d];
    mx /= D, my /= D;
    double vx = 0.0, vy = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      vx += (x[i * D + d] - mx) * (x[i * D + d] - mx);
      vy += (y[i * D + d] - my) * (y[i * D + d] - my);
    }
    vx /= D, vy /= D;
    EXPECT_NEAR(my, 0.0, test::kExactAbsTol) << "row " << i;
    // Variance 1 up to the eps: vx / (vx + eps) = 1 - O(1e-5) for these rows.
    EXPECT_NEAR(vy, vx / (vx + kLayerNormEps), test::kExactAbsTol) << "row " << i;
    EXPECT_NEAR(mean[i], mx, test::kExactAbsTol);
    EXPECT_NEAR(rstd[i], 1.0 / std::sqrt(vx + kLayerNormEps), test::kExactAbsTol);
  }
}

TEST(LayerNorm, AffineMatchesFormula) {
  const int64_t n = 3, D = 5;
  Rng rng(11);
  const std::vector<double> x = rng.vec(n * D), w = rng.vec(D), b = rng.vec(D);
  std::vector<double> y = zeros<double>(n * D), mean = zeros<double>(n), rstd = zeros<double>(n);
  layernorm_forward(x.data(), w.data(), b.data(), n, D, y.data(), mean.data(), rstd.data());
  std::vector<double> want(n * D);
  for (int64_t i = 0; i < n; ++i) {
    double m = 0.0, v = 0.0;
    for (int64_t d = D - 1; d >= 0; --d) m += x[i * D + d];  // reverse order: independent rounding
    m /= D;
    for (int64_t d = D - 1; d >= 0; --d) v += (x[i * D + d] - m) * (x[i * D + d] - m);
    v /= D;
    for (int64_t d = 0; d < D; ++d) want[i * D + d] = w[d] * (x[i * D + d] - m) / std::sqrt(v + 1e-5) + b[d];
  }
  EXPECT_TRUE(test::close_normwise(y, want, test::Tolerance<double>::rel));
}

TEST(LayerNorm, ConstantRowGivesBias) {
  const int64_t D = 4;
  const std::vector<double> x(D, 2.5), w = {1, 2, 3, 4}, b = {0.5, -1, 2, 0};
  std::vector<double> y = zeros<double>(D), mean = zeros<double>(1), rstd = zeros<double>(1);
  layernorm_forward(x.data(), w.data(), b.data(), 1, D, y.data(), mean.data(), rstd.data());
  EXPECT_EQ(y, b);
  EXPECT_EQ(mean[0], 2.5);
}

TEST(LayerNorm, BackwardMatchesCentralDifference) {
  for (const auto& [n, D] : kShapes) {
    Rng rng(12);
    std::vector<double> x = rng.vec(n * D), w = rng.vec(D, 0.5, 1.5), b = rng.vec(D);
    const std::vector<double> r = rng.vec(n * D);  // loss = <r, y>
    std::vector<double> y = zeros<double>(n * D), mean = zeros<double>(n), rstd = zeros<double>(n);
    auto loss = [&] {
      layernorm_forward(x.data(), w.data(), b.data(), n, D, y.data(), mean.data(), rstd.data());
      return dot(r, y);
    };
    loss();
    std::vector<double> dx = zeros<double>(n * D), dw = zeros<double>(D), db = zeros<double>(D);
    layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), r.data(), n, D, dx.data(), dw.data(),
                       db.data());
    EXPECT_TRUE(test::gradient_matches(loss, x, dx)) << shape_name(n, D) << " dx";
    EXPECT_TRUE(test::gradient_matches(loss, w, dw)) << shape_name(n, D) << " dw";
    EXPECT_TRUE(test::gradient_matches(loss, b, db)) << shape_name(n, D) << " db";
  }
}

TEST(LayerNorm, BackwardAccumulates) {
  const int64_t n = 3, D = 5;
  Rng rng(13);
  const std::vector<double> x = rng.vec(n * D), w = rng.vec(D), b = rng.vec(D), dy = rng.vec(n * D);
  std::vector<double> y = zeros<double>(n * D), mean = zeros<double>(n), rstd = zeros<double>(n);
  layernorm_forward(x.data(), w.data(), b.data(), n, D, y.data(), mean.data(), rstd.data());
  EXPECT_TRUE(test::backward_accumulates({n * D, D, D}, [&](std::vector<std::vector<double>>& g) {
    layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), n, D, g[0].data(), g[1].data(),
                       g[2].data());
  }));
}

// Forward outputs and gradients of one run in dtype T: {y, mean, rstd, dx, dw, db}.
template <class T>
std::vector<std::vector<T>> run(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& b, const std::vector<double>& dy, int64_t n, int64_t D) {
  const std::vector<T> xt = cast<T>(x), wt = cast<T>(w), bt = cast<T>(b), dyt = cast<T>(dy);
  std::vector<T> y = zeros<T>(n * D), mean = zeros<T>(n), rstd = zeros<T>(n);
  std::vector<T> dx = zeros<T>(n * D), dw = zeros<T>(D), db = zeros<T>(D);
  layernorm_forward(xt.data(), wt.data(), bt.data(), n, D, y.data(), mean.data(), rstd.data());
  layernorm_backward(xt.data(), wt.data(), mean.data(), rstd.data(), dyt.data(), n, D, dx.data(), dw.data(),
                     db.data());
  return {y, mean, rstd, dx, dw, db};
}

TEST(LayerNorm, Fp32CloseToFp64) {
  const int64_t n = 5, D = 7;
  Rng rng(14);
  const auto x = test::round_to_f32(rng.vec(n * D)), w = test::round_to_f32(rng.vec(D));
  const auto b = test::round_to_f32(rng.vec(D)), dy = test::round_to_f32(rng.vec(n * D));
  const auto f = run<float>(x, w, b, dy, n, D);
  const auto d = run<double>(x, w, b, dy, n, D);
  for (size_t i = 0; i < d.size(); ++i)
    EXPECT_TRUE(test::close_normwise(f[i], d[i], test::Tolerance<float>::rel)) << "output #" << i;
}

}  // namespace
}  // namespace parity::layernorm_test
