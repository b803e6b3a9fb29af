#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <array>
#include <iostream>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"

namespace parity::matmul_test {  // one namespace per file: the tests build as unity batches
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

// Every kernel the machine can run: baseline always, avx2 where the CPU has it.
std::vector<MatmulIsa> isas() {
  std::vector<MatmulIsa> out = {MatmulIsa::automatic, MatmulIsa::baseline};
  if (matmul_isa_available(MatmulIsa::avx2)) out.push_back(MatmulIsa::avx2);
  return out;
}
const char* isa_name(MatmulIsa isa) {
  return isa == MatmulIsa::avx2 ? "avx2" : isa == MatmulIsa::baseline ? "baseline" : "automatic";
}

template <class T>
void expect_forward_equals_naive_bitwise(const std::vector<T>& x, const std::vector<T>& w, const Shape3& s) {
  const auto [n, k, m] = s;
  const std::vector<T> want = naive_matmul(x, w, n, k, m);
  for (MatmulIsa isa : isas()) {
    std::vector<T> y(static_cast<size_t>(n * m), T(-7));
    matmul_forward(x.data(), w.data(), y.data(), n, k, m, isa);
    EXPECT_TRUE(test::bitwise_equal(y, want)) << shape_name(s) << " sizeof(T)=" << sizeof(T) << " " << isa_name(isa);
  }
  std::vector<T> y(static_cast<size_t>(n * m), T(-7));
  matmul_forward(x.data(), w.data(), y.data(), n, k, m);  // the plain entry point
  EXPECT_TRUE(test::bitwise_equal(y, want)) << shape_name(s) << " sizeof(T)=" << sizeof(T);
}

TEST(Matmul, AvailableKernels) {
  EXPECT_TRUE(matmul_isa_available(MatmulIsa::baseline));
  EXPECT_TRUE(matmul_isa_available(MatmulIsa::automatic));
  std::cout << "[ INFO     ] matmul kernels tested:";
  for (MatmulIsa isa : isas()) std::cout << " " << isa_name(isa);
  std::cout << "\n";
}

TEST(Matmul, ForwardEqualsNaiveTripleLoopBitwise) {
  // Shapes that cross every blocking of the fast kernel (rows 4/64, columns 12/24,
  // summed dimension 256), odd tails included.
  const std::vector<Shape3> shapes = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {9, 300, 257}, {2, 129, 1031},
                                      {67, 513, 25}, {0, 3, 2}, {2, 0, 3}, {3, 2, 0}};
  for (const Shape3& s : shapes) {
    const auto [n, k, m] = s;
    Rng rng(1);
    const std::vector<double> x = rng.vec(n * k), w = rng.vec(k * m);
    expect_forward_equals_naive_bitwise(x, w, s);
    expect_forward_equals_naive_bitwise(cast<float>(x), cast<float>(w), s);
  }
}

// dx[i][p] = dx + (sum over j in order), dw[p][j] = dw + (sum over i in order), in dtype T.
template <class T>
void expect_backward_equals_naive_bitwise(const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& dy,
                                          const Shape3& s) {
  const auto [n, k, m] = s;
  Rng rng(2);
  const std::vector<T> dx0 = cast<T>(rng.vec(n * k)), dw0 = cast<T>(rng.vec(k * m));
  std::vector<T> want_dx = dx0, want_dw = dw0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p) {
      T acc = T(0);
      for (int64_t j = 0; j < m; ++j) acc += dy[i * m + j] * w[p * m + j];
      want_dx[i * k + p] += acc;
    }
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < m; ++j) {
      T acc = T(0);
      for (int64_t i = 0; i < n; ++i) acc += x[i * k + p] * dy[i * m + j];
      want_dw[p * m + j] += acc;
    }
  for (MatmulIsa isa : isas()) {
    std::vector<T> dx = dx0, dw = dw0;
    matmul_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), n, k, m, isa);
    EXPECT_TRUE(test::bitwise_equal(dx, want_dx)) << shape_name(s) << " sizeof(T)=" << sizeof(T) << " "
                                                  << isa_name(isa);
    EXPECT_TRUE(test::bitwise_equal(dw, want_dw)) << shape_name(s) << " sizeof(T)=" << sizeof(T) << " "
                                                  << isa_name(isa);
  }
}

TEST(Matmul, BackwardEqualsNaiveLoopsBitwise) {
  const std::vector<Shape3> shapes = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {300, 9, 257}, {129, 2, 1031},
                                      {0, 3, 2}, {2, 0, 3}, {3, 2, 0}};
  for (const Shape3& s : shapes) {
    const auto [n, k, m] = s;
    Rng rng(3);
    const std::vector<double> x = rng.vec(n * k), w = rng.vec(k * m), dy = rng.vec(n * m);
    expect_backward_equals_naive_bitwise(x, w, dy, s);
    expect_backward_equals_naive_bitwise(cast<float>(x), cast<float>(w), cast<float>(dy), s);
  }
}

TEST(Matmul, SignedZerosAndSubnormalsBitwise) {
  // -0 products and subnormal partial sums must round exactly as in the naive loop
  // (no flush-to-zero, no reassociation).
  const int64_t n = 5, k = 7, m = 13;
  Rng rng(6);
  std::vector<double> x = rng.vec(n * k), w = rng.vec(k * m), dy = rng.vec(n * m);
  for (size_t e = 0; e < x.size(); e += 3) x[e] = -0.0;
  for (size_t e = 1; e < w.size(); e += 4) w[e] *= 1e-300;  // products ~1e-300 * x: some subnormal
  for (size_t e = 2; e < x.size(); e += 5) x[e] *= 1e-10;
  for (size_t e = 0; e < dy.size(); e += 2) dy[e] *= 1e-305;
  expect_forward_equals_naive_bitwise(x, w, {n, k, m});
  expect_backward_equals_naive_bitwise(x, w, dy, {n, k, m});
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
}  // namespace parity::matmul_test
