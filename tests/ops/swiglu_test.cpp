#include "ops/swiglu.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"

namespace parity::swiglu_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::dot;
using test::Rng;
using test::zeros;

using Shape3 = std::array<int64_t, 3>;  // (n, D, F)
const std::vector<Shape3> kShapes = {{1, 1, 1}, {3, 5, 7}, {5, 3, 1}, {2, 1, 3}, {0, 3, 2}};

std::string shape_name(const Shape3& s) {
  return "n=" + std::to_string(s[0]) + " D=" + std::to_string(s[1]) + " F=" + std::to_string(s[2]);
}

TEST(SwiGLU, ForwardMatchesFormula) {
  const int64_t n = 9;
  Rng rng(80);
  const std::vector<double> a = rng.vec(n, -6.0, 6.0), b = rng.vec(n);
  std::vector<double> h = zeros<double>(n), want(n);
  swiglu_forward(a.data(), b.data(), n, h.data());
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] / (1.0 + std::exp(-a[i])) * b[i];
  EXPECT_TRUE(test::close_normwise(h, want, test::Tolerance<double>::rel));
}

TEST(SwiGLU, StableForHugeInputs) {
  const std::vector<double> a = {-1000.0, 1000.0, 0.0}, b = {2.0, 3.0, 5.0};
  std::vector<double> h = zeros<double>(3), da = zeros<double>(3), db = zeros<double>(3);
  const std::vector<double> dh = {1.0, 1.0, 1.0};
  swiglu_forward(a.data(), b.data(), 3, h.data());
  swiglu_backward(a.data(), b.data(), dh.data(), 3, da.data(), db.data());
  EXPECT_EQ(h, (std::vector<double>{0.0, 3000.0, 0.0}));
  EXPECT_EQ(da, (std::vector<double>{0.0, 3.0, 2.5}));  // silu'(0) = 1/2
  EXPECT_EQ(db, (std::vector<double>{0.0, 1000.0, 0.0}));
}

TEST(SwiGLU, GateBackwardMatchesCentralDifference) {
  for (int64_t n : {0, 1, 3, 7}) {
    Rng rng(81);
    std::vector<double> a = rng.vec(n, -4.0, 4.0), b = rng.vec(n);
    const std::vector<double> r = rng.vec(n);  // loss = <r, h>
    auto loss = [&] {
      std::vector<double> h = zeros<double>(n);
      swiglu_forward(a.data(), b.data(), n, h.data());
      return dot(r, h);
    };
    std::vector<double> da = zeros<double>(n), db = zeros<double>(n);
    swiglu_backward(a.data(), b.data(), r.data(), n, da.data(), db.data());
    EXPECT_TRUE(test::gradient_matches(loss, a, da)) << "n=" << n << " da";
    EXPECT_TRUE(test::gradient_matches(loss, b, db)) << "n=" << n << " db";
  }
}

// Independent FFN: out[i][d] = sum_f (silu(x_i·w1[:,f]) * (x_i·w3[:,f])) * w2[f][d].
std::vector<double> naive_ffn(const std::vector<double>& x, const std::vector<double>& w1,
                              const std::vector<double>& w3, const std::vector<double>& w2, int64_t n, int64_t D,
                              int64_t F) {
  std::vector<double> out(n * D, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t f = 0; f < F; ++f) {
      double a = 0.0, b = 0.0;
      for (int64_t d = 0; d < D; ++d) a += x[i * D + d] * w1[d * F + f], b += x[i * D + d] * w3[d * F + f];
      const double h = a / (1.0 + std::exp(-a)) * b;
      for (int64_t d = 0; d < D; ++d) out[i * D + d] += h * w2[f * D + d];
    }
  return out;
}

TEST(Ffn, ForwardMatchesFormulaAndFillsCache) {
  const int64_t n = 3, D = 5, F = 7;
  Rng rng(82);
  const std::vector<double> x = rng.vec(n * D), w1 = rng.vec(D * F), w3 = rng.vec(D * F), w2 = rng.vec(F * D);
  std::vector<double> out = zeros<double>(n * D);
  FfnCache<double> cache;
  ffn_forward(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), out.data(), cache);
  EXPECT_TRUE(test::close_normwise(out, naive_ffn(x, w1, w3, w2, n, D, F), test::Tolerance<double>::rel));
  ASSERT_EQ(cache.h.size(), static_cast<size_t>(n * F));
  std::vector<double> h = zeros<double>(n * F);
  swiglu_forward(cache.a.data(), cache.b.data(), n * F, h.data());
  EXPECT_TRUE(test::bitwise_equal(cache.h, h));
}

TEST(Ffn, BackwardMatchesCentralDifference) {
  for (const Shape3& s : kShapes) {
    const auto [n, D, F] = s;
    Rng rng(83);
    std::vector<double> x = rng.vec(n * D), w1 = rng.vec(D * F), w3 = rng.vec(D * F), w2 = rng.vec(F * D);
    const std::vector<double> r = rng.vec(n * D);  // loss = <r, out>
    FfnCache<double> cache;
    auto loss = [&] {
      std::vector<double> out = zeros<double>(n * D);
      ffn_forward(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), out.data(), cache);
      return dot(r, out);
    };
    loss();
    std::vector<double> dx = zeros<double>(n * D), dw1 = zeros<double>(D * F), dw3 = zeros<double>(D * F),
                        dw2 = zeros<double>(F * D);
    ffn_backward(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), cache, r.data(), dx.data(), dw1.data(),
                 dw3.data(), dw2.data());
    EXPECT_TRUE(test::gradient_matches(loss, x, dx)) << shape_name(s) << " dx";
    EXPECT_TRUE(test::gradient_matches(loss, w1, dw1)) << shape_name(s) << " dw1";
    EXPECT_TRUE(test::gradient_matches(loss, w3, dw3)) << shape_name(s) << " dw3";
    EXPECT_TRUE(test::gradient_matches(loss, w2, dw2)) << shape_name(s) << " dw2";
  }
}

TEST(Ffn, BackwardAccumulatesAndSkipsNull) {
  const int64_t n = 3, D = 5, F = 7;
  Rng rng(84);
  const std::vector<double> x = rng.vec(n * D), w1 = rng.vec(D * F), w3 = rng.vec(D * F), w2 = rng.vec(F * D);
  const std::vector<double> dout = rng.vec(n * D);
  std::vector<double> out = zeros<double>(n * D);
  FfnCache<double> cache;
  ffn_forward(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), out.data(), cache);
  EXPECT_TRUE(test::backward_accumulates({n * D, D * F, D * F, F * D}, [&](std::vector<std::vector<double>>& g) {
    ffn_backward(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), cache, dout.data(), g[0].data(), g[1].data(),
                 g[2].data(), g[3].data());
  }));
  std::vector<double> dx = zeros<double>(n * D), dw2 = zeros<double>(F * D);
  ffn_backward<double>(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), cache, dout.data(), dx.data(),
                       nullptr, nullptr, nullptr);
  ffn_backward<double>(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), cache, dout.data(), nullptr,
                       nullptr, nullptr, dw2.data());
  std::vector<double> dx_all = zeros<double>(n * D), dw1 = zeros<double>(D * F), dw3 = zeros<double>(D * F),
                      dw2_all = zeros<double>(F * D);
  ffn_backward(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), cache, dout.data(), dx_all.data(), dw1.data(),
               dw3.data(), dw2_all.data());
  EXPECT_TRUE(test::bitwise_equal(dx, dx_all));
  EXPECT_TRUE(test::bitwise_equal(dw2, dw2_all));
}

template <class T>
std::vector<std::vector<T>> run(const std::vector<std::vector<double>>& in, int64_t n, int64_t D, int64_t F) {
  const std::vector<T> x = cast<T>(in[0]), w1 = cast<T>(in[1]), w3 = cast<T>(in[2]), w2 = cast<T>(in[3]);
  const std::vector<T> dout = cast<T>(in[4]);
  std::vector<T> out = zeros<T>(n * D), dx = zeros<T>(n * D), dw1 = zeros<T>(D * F), dw3 = zeros<T>(D * F),
                 dw2 = zeros<T>(F * D);
  FfnCache<T> cache;
  ffn_forward(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), out.data(), cache);
  ffn_backward(x.data(), n, D, F, w1.data(), w3.data(), w2.data(), cache, dout.data(), dx.data(), dw1.data(),
               dw3.data(), dw2.data());
  return {out, dx, dw1, dw3, dw2};
}

TEST(Ffn, Fp32CloseToFp64) {
  const int64_t n = 5, D = 7, F = 3;
  Rng rng(85);
  std::vector<std::vector<double>> in;
  for (int64_t size : {n * D, D * F, D * F, F * D, n * D}) in.push_back(test::round_to_f32(rng.vec(size)));
  const auto f = run<float>(in, n, D, F);
  const auto d = run<double>(in, n, D, F);
  for (size_t i = 0; i < d.size(); ++i)
    EXPECT_TRUE(test::close_normwise(f[i], d[i], test::Tolerance<float>::rel)) << "output #" << i;
}

}  // namespace
}  // namespace parity::swiglu_test
