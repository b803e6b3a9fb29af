#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"

namespace parity {
namespace {

using test::cast;
using test::dot;
using test::Rng;
using test::zeros;

using Shape3 = std::array<int64_t, 3>;  // (n, k, m)
const std::vector<Shape3> kShapes = {{1, 1, 1}, {3, 5, 7}, {5, 3, 1}, {1, 7, 3}, {4, 1, 5},
                                     {0, 3, 2}, {2, 0, 3}, {3, 2, 0}};

std::string shape_name(const Shape3& s) {
  return "n=" + std::to_string(s[0]) + " k=" + std::to_string(s[1]) + " m=" + std::to_string(s[2]);
}

// The definition, written independently of the library: y[i][j] = sum over p in order.
// x (n, k), w (k, m) -> (n, m).
template <class T>
std::vector<T> naive_matmul(const std::vector<T>& x, const std::vector<T>& w, int64_t n, int64_t k, int64_t m) {
  std::vector<T> y(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      T s = T(0);
      for (int64_t p = 0; p < k; ++p) s += x[i * k + p] * w[p * m + j];
      y[i * m + j] = s;
    }
  return y;
}

TEST(Matmul, ForwardSmallExactCase) {
  // (2, 3) · (3, 2), integers: exact in any order.
  const std::vector<double> x = {1, 2, 3, 4, 5, 6};
  const std::vector<double> w = {7, 8, 9, 10, 11, 12};
  std::vector<double> y(4, -1.0);
  matmul_forward(x.data(), w.data(), y.data(), 2, 3, 2);
  EXPECT_EQ(y, (std::vector<double>{58, 64, 139, 154}));
}

TEST(Matmul, ForwardEqualsNaiveTripleLoopBitwise) {
  // Shapes that cross any blocking of the fast kernel, odd tails included.
  const std::vector<Shape3> shapes = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {9, 300, 257}, {2, 129, 1031}};
  for (const Shape3& s : shapes) {
    const auto [n, k, m] = s;
    Rng rng(1);
    const std::vector<double> x = rng.vec(n * k), w = rng.vec(k * m);
    std::vector<double> y(static_cast<size_t>(n * m), -7.0);
    matmul_forward(x.data(), w.data(), y.data(), n, k, m);
    EXPECT_TRUE(test::bitwise_equal(y, naive_matmul(x, w, n, k, m))) << shape_name(s);
    const std::vector<float> xf = cast<float>(x), wf = cast<float>(w);
    std::vector<float> yf(static_cast<size_t>(n * m), -7.0f);
    matmul_forward(xf.data(), wf.data(), yf.data(), n, k, m);
    EXPECT_TRUE(test::bitwise_equal(yf, naive_matmul(xf, wf, n, k, m))) << shape_name(s) << " fp32";
  }
}

TEST(Matmul, BackwardEqualsNaiveLoopsBitwise) {
  // dx[i][p] = dx + (sum over j in order), dw[p][j] = dw + (sum over i in order).
  const std::vector<Shape3> shapes = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {300, 9, 257}, {129, 2, 1031}};
  for (const Shape3& s : shapes) {
    const auto [n, k, m] = s;
    Rng rng(2);
    const std::vector<double> x = rng.vec(n * k), w = rng.vec(k * m), dy = rng.vec(n * m);
    const std::vector<double> dx0 = rng.vec(n * k), dw0 = rng.vec(k * m);
    std::vector<double> dx = dx0, dw = dw0;
    matmul_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), n, k, m);
    std::vector<double> want_dx = dx0, want_dw = dw0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < k; ++p) {
        double acc = 0.0;
        for (int64_t j = 0; j < m; ++j) acc += dy[i * m + j] * w[p * m + j];
        want_dx[i * k + p] += acc;
      }
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < m; ++j) {
        double acc = 0.0;
        for (int64_t i = 0; i < n; ++i) acc += x[i * k + p] * dy[i * m + j];
        want_dw[p * m + j] += acc;
      }
    EXPECT_TRUE(test::bitwise_equal(dx, want_dx)) << shape_name(s);
    EXPECT_TRUE(test::bitwise_equal(dw, want_dw)) << shape_name(s);
  }
}

TEST(Matmul, BackwardMatchesCentralDifference) {
  for (const Shape3& s : kShapes) {
    const auto [n, k, m] = s;
    Rng rng(3);
    std::vector<double> x = rng.vec(n * k), w = rng.vec(k * m);
    const std::vector<double> r = rng.vec(n * m);  // loss = <r, y>
    auto loss = [&] {
      std::vector<double> y = zeros<double>(n * m);
      matmul_forward(x.data(), w.data(), y.data(), n, k, m);
      return dot(r, y);
    };
    std::vector<double> dx = zeros<double>(n * k), dw = zeros<double>(k * m);
    matmul_backward(x.data(), w.data(), r.data(), dx.data(), dw.data(), n, k, m);
    EXPECT_TRUE(test::gradient_matches(loss, x, dx)) << shape_name(s) << " dx";
    EXPECT_TRUE(test::gradient_matches(loss, w, dw)) << shape_name(s) << " dw";
  }
}

TEST(Matmul, BackwardAccumulatesAndSkipsNull) {
  const int64_t n = 3, k = 5, m = 7;
  Rng rng(4);
  const std::vector<double> x = rng.vec(n * k), w = rng.vec(k * m), dy = rng.vec(n * m);
  EXPECT_TRUE(test::backward_accumulates({n * k, k * m}, [&](std::vector<std::vector<double>>& g) {
    matmul_backward(x.data(), w.data(), dy.data(), g[0].data(), g[1].data(), n, k, m);
  }));
  std::vector<double> dx = zeros<double>(n * k), dw = zeros<double>(k * m);
  matmul_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), n, k, m);
  std::vector<double> dx_only = zeros<double>(n * k), dw_only = zeros<double>(k * m);
  matmul_backward<double>(x.data(), w.data(), dy.data(), dx_only.data(), nullptr, n, k, m);
  matmul_backward<double>(x.data(), w.data(), dy.data(), nullptr, dw_only.data(), n, k, m);
  EXPECT_TRUE(test::bitwise_equal(dx_only, dx));
  EXPECT_TRUE(test::bitwise_equal(dw_only, dw));
}

TEST(Matmul, Fp32CloseToFp64) {
  const int64_t n = 5, k = 7, m = 3;
  Rng rng(5);
  const std::vector<double> x = test::round_to_f32(rng.vec(n * k)), w = test::round_to_f32(rng.vec(k * m));
  const std::vector<double> dy = test::round_to_f32(rng.vec(n * m));
  std::vector<double> y = zeros<double>(n * m), dx = zeros<double>(n * k), dw = zeros<double>(k * m);
  matmul_forward(x.data(), w.data(), y.data(), n, k, m);
  matmul_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), n, k, m);
  const std::vector<float> xf = cast<float>(x), wf = cast<float>(w), dyf = cast<float>(dy);
  std::vector<float> yf = zeros<float>(n * m), dxf = zeros<float>(n * k), dwf = zeros<float>(k * m);
  matmul_forward(xf.data(), wf.data(), yf.data(), n, k, m);
  matmul_backward(xf.data(), wf.data(), dyf.data(), dxf.data(), dwf.data(), n, k, m);
  EXPECT_TRUE(test::close_normwise(yf, y, test::Tolerance<float>::rel));
  EXPECT_TRUE(test::close_normwise(dxf, dx, test::Tolerance<float>::rel));
  EXPECT_TRUE(test::close_normwise(dwf, dw, test::Tolerance<float>::rel));
}

}  // namespace
}  // namespace parity
