#include "ops/permute.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"
#include "core/error.h"

namespace parity::permute_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::dot;
using test::Rng;
using test::zeros;

using Shape4 = std::array<int64_t, 4>;  // (n, E, K, D)
const std::vector<Shape4> kShapes = {{1, 1, 1, 1}, {3, 5, 2, 7}, {5, 3, 3, 1}, {4, 2, 1, 3}, {0, 3, 2, 4}};

std::string shape_name(const Shape4& s) {
  return "n=" + std::to_string(s[0]) + " E=" + std::to_string(s[1]) + " K=" + std::to_string(s[2]) +
         " D=" + std::to_string(s[3]);
}

TEST(Permutation, GroupsByExpertThenAssignment) {
  const std::vector<int64_t> chosen = {2, 0, 0, 1, 2, 1};  // (n=3, K=2): a -> expert
  const Permutation p = make_permutation(chosen.data(), 3, 4, 2);
  EXPECT_EQ(p.K, 2);
  EXPECT_EQ(p.counts, (std::vector<int64_t>{2, 2, 2, 0}));
  EXPECT_EQ(p.src, (std::vector<int64_t>{1, 2, 3, 5, 0, 4}));
  const int64_t bad = 4;
  EXPECT_THROW(make_permutation(&bad, 1, 4, 1), Error);
}

TEST(Permutation, PermuteThenUnpermuteRepeatsEachTokenKTimes) {
  const std::vector<int64_t> chosen = {2, 0, 0, 1, 2, 1};
  const Permutation p = make_permutation(chosen.data(), 3, 4, 2);
  const std::vector<double> x = {1, 2, 3, 4, 5, 6};  // (3, 2)
  std::vector<double> xg(12, -1.0), y(12, -1.0);
  permute_forward(x.data(), 2, p, xg.data());
  EXPECT_EQ(xg, (std::vector<double>{1, 2, 3, 4, 3, 4, 5, 6, 1, 2, 5, 6}));  // rows of tokens 0,1,1,2,0,2
  unpermute_forward(xg.data(), 2, p, y.data());
  EXPECT_EQ(y, (std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4, 5, 6, 5, 6}));  // y[a] = x[a / K]
}

// Properties of make_permutation for random routings (RapidCheck).
RC_GTEST_PROP(Permutation, IsAStableGroupingByExpert, ()) {
  const int64_t n = *rc::gen::inRange<int64_t>(0, 9);
  const int64_t E = *rc::gen::inRange<int64_t>(1, 6);
  const int64_t K = *rc::gen::inRange<int64_t>(1, E + 1);
  const auto chosen = *rc::gen::container<std::vector<int64_t>>(static_cast<size_t>(n * K),
                                                                 rc::gen::inRange<int64_t>(0, E));
  const Permutation p = make_permutation(chosen.data(), n, E, K);
  RC_CLASSIFY(std::count(p.counts.begin(), p.counts.end(), 0) > 0, "an expert with no rows");
  RC_CLASSIFY(n == 0, "no tokens");
  std::vector<int64_t> sorted = p.src;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t a = 0; a < n * K; ++a) RC_ASSERT(sorted[a] == a);  // a permutation of 0..n*K-1
  int64_t r = 0;
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t c = 0; c < p.counts[e]; ++c, ++r) {
      RC_ASSERT(chosen[p.src[r]] == e);
      if (c > 0) RC_ASSERT(p.src[r - 1] < p.src[r]);
    }
  }
  RC_ASSERT(r == n * K);
  // unpermute inverts the grouping exactly: y[a] = (row a in (token, slot) order).
  std::vector<double> z(static_cast<size_t>(n * K)), zg(z.size()), back(z.size());
  for (size_t a = 0; a < z.size(); ++a) z[a] = static_cast<double>(a);
  for (size_t i = 0; i < z.size(); ++i) zg[i] = z[static_cast<size_t>(p.src[i])];
  unpermute_forward(zg.data(), 1, p, back.data());
  RC_ASSERT(back == z);
}

TEST(Permute, BackwardsMatchCentralDifference) {
  for (const Shape4& s : kShapes) {
    const auto [n, E, K, D] = s;
    Rng rng(70);
    const std::vector<int64_t> chosen = rng.indices(n * K, E);
    const Permutation p = make_permutation(chosen.data(), n, E, K);
    std::vector<double> x = rng.vec(n * D), yg = rng.vec(n * K * D);
    const std::vector<double> r = rng.vec(n * K * D);  // loss = <r, out> for both ops
    auto loss_permute = [&] {
      std::vector<double> xg = zeros<double>(n * K * D);
      permute_forward(x.data(), D, p, xg.data());
      return dot(r, xg);
    };
    auto loss_unpermute = [&] {
      std::vector<double> y = zeros<double>(n * K * D);
      unpermute_forward(yg.data(), D, p, y.data());
      return dot(r, y);
    };
    std::vector<double> dx = zeros<double>(n * D), dyg = zeros<double>(n * K * D);
    permute_backward(r.data(), D, p, dx.data());
    unpermute_backward(r.data(), D, p, dyg.data());
    EXPECT_TRUE(test::gradient_matches(loss_permute, x, dx)) << shape_name(s) << " permute";
    EXPECT_TRUE(test::gradient_matches(loss_unpermute, yg, dyg)) << shape_name(s) << " unpermute";
  }
}

TEST(Permute, BackwardsAccumulate) {
  const int64_t n = 4, E = 3, K = 2, D = 3;
  Rng rng(71);
  const std::vector<int64_t> chosen = rng.indices(n * K, E);
  const Permutation p = make_permutation(chosen.data(), n, E, K);
  const std::vector<double> d = rng.vec(n * K * D);
  EXPECT_TRUE(test::backward_accumulates({n * D, n * K * D}, [&](std::vector<std::vector<double>>& g) {
    permute_backward(d.data(), D, p, g[0].data());
    unpermute_backward(d.data(), D, p, g[1].data());
  }));
}

TEST(Combine, ForwardAddsWeightedSlotsIntoOut) {
  const std::vector<double> y = {1, 2, 10, 20, 3, 4, 30, 40};  // (n=2, K=2, D=2)
  const std::vector<double> w = {0.5, 2.0, 1.0, -1.0};          // (2, 2)
  std::vector<double> out = {100, 200, 0, 0};                   // (2, 2): combine ADDS into out
  combine_forward(y.data(), w.data(), 2, 2, 2, out.data());
  EXPECT_EQ(out, (std::vector<double>{100 + 0.5 + 20, 200 + 1 + 40, 3 - 30, 4 - 40}));
}

TEST(Combine, BackwardMatchesCentralDifference) {
  for (const Shape4& s : kShapes) {
    const auto [n, E, K, D] = s;
    (void)E;
    Rng rng(72);
    std::vector<double> y = rng.vec(n * K * D), w = rng.vec(n * K);
    const std::vector<double> r = rng.vec(n * D);  // loss = <r, out>
    auto loss = [&] {
      std::vector<double> out = zeros<double>(n * D);
      combine_forward(y.data(), w.data(), n, K, D, out.data());
      return dot(r, out);
    };
    std::vector<double> dy = zeros<double>(n * K * D), dw = zeros<double>(n * K);
    combine_backward(y.data(), w.data(), r.data(), n, K, D, dy.data(), dw.data());
    EXPECT_TRUE(test::gradient_matches(loss, y, dy)) << shape_name(s) << " dy";
    EXPECT_TRUE(test::gradient_matches(loss, w, dw)) << shape_name(s) << " dw";
  }
}

TEST(Combine, BackwardAccumulates) {
  const int64_t n = 3, K = 2, D = 5;
  Rng rng(73);
  const std::vector<double> y = rng.vec(n * K * D), w = rng.vec(n * K), dout = rng.vec(n * D);
  EXPECT_TRUE(test::backward_accumulates({n * K * D, n * K}, [&](std::vector<std::vector<double>>& g) {
    combine_backward(y.data(), w.data(), dout.data(), n, K, D, g[0].data(), g[1].data());
  }));
}

template <class T>
std::vector<std::vector<T>> run(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& dout, const Permutation& p, int64_t n, int64_t K,
                                int64_t D) {
  const std::vector<T> xt = cast<T>(x), wt = cast<T>(w), dt = cast<T>(dout);
  std::vector<T> xg = zeros<T>(n * K * D), y = zeros<T>(n * K * D), out = zeros<T>(n * D);
  permute_forward(xt.data(), D, p, xg.data());
  unpermute_forward(xg.data(), D, p, y.data());
  combine_forward(y.data(), wt.data(), n, K, D, out.data());
  std::vector<T> dy = zeros<T>(n * K * D), dw = zeros<T>(n * K), dyg = zeros<T>(n * K * D), dx = zeros<T>(n * D);
  combine_backward(y.data(), wt.data(), dt.data(), n, K, D, dy.data(), dw.data());
  unpermute_backward(dy.data(), D, p, dyg.data());
  permute_backward(dyg.data(), D, p, dx.data());
  return {out, dw, dx};
}

TEST(Permute, Fp32CloseToFp64) {
  const int64_t n = 5, E = 4, K = 2, D = 3;
  Rng rng(74);
  const std::vector<int64_t> chosen = rng.indices(n * K, E);
  const Permutation p = make_permutation(chosen.data(), n, E, K);
  const auto x = test::round_to_f32(rng.vec(n * D)), w = test::round_to_f32(rng.vec(n * K));
  const auto dout = test::round_to_f32(rng.vec(n * D));
  const auto f = run<float>(x, w, dout, p, n, K, D);
  const auto d = run<double>(x, w, dout, p, n, K, D);
  for (size_t i = 0; i < d.size(); ++i)
    EXPECT_TRUE(test::close_normwise(f[i], d[i], test::Tolerance<float>::rel)) << "output #" << i;
}

}  // namespace
}  // namespace parity::permute_test
