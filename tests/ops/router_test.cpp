#include "ops/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"
#include "core/error.h"

namespace parity::router_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::dot;
using test::Rng;
using test::zeros;

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1}, {3, 1}, {1, 3}, {3, 5}, {5, 7}, {0, 4}};
const Score kScores[] = {Score::softmax, Score::sigmoid};

std::string case_name(int64_t n, int64_t E, Score sc) {
  return "n=" + std::to_string(n) + " E=" + std::to_string(E) + (sc == Score::softmax ? " softmax" : " sigmoid");
}

// ---- scores ----

TEST(RouterScores, SoftmaxMatchesFormulaAndRowsSumToOne) {
  const int64_t n = 4, E = 6;
  Rng rng(50);
  const std::vector<double> logits = rng.vec(n * E, -2.0, 2.0);
  std::vector<double> s = zeros<double>(n * E), want(n * E);
  router_scores_forward(logits.data(), n, E, Score::softmax, s.data());
  for (int64_t i = 0; i < n; ++i) {
    double z = 0.0, row = 0.0;
    for (int64_t e = 0; e < E; ++e) z += std::exp(logits[i * E + e]);
    for (int64_t e = 0; e < E; ++e) want[i * E + e] = std::exp(logits[i * E + e]) / z, row += s[i * E + e];
    EXPECT_NEAR(row, 1.0, test::kExactAbsTol) << "row " << i;
  }
  EXPECT_TRUE(test::close_normwise(s, want, test::Tolerance<double>::rel));
}

TEST(RouterScores, SigmoidMatchesFormula) {
  const int64_t n = 3, E = 5;
  Rng rng(51);
  const std::vector<double> logits = rng.vec(n * E, -6.0, 6.0);
  std::vector<double> s = zeros<double>(n * E), want(n * E);
  router_scores_forward(logits.data(), n, E, Score::sigmoid, s.data());
  for (int64_t i = 0; i < n * E; ++i) want[i] = 1.0 / (1.0 + std::exp(-logits[i]));
  EXPECT_TRUE(test::close_normwise(s, want, test::Tolerance<double>::rel));
}

TEST(RouterScores, StableForHugeLogits) {
  const std::vector<double> logits = {1000.0, -1000.0, 999.0, 0.0};  // (1, 4)
  std::vector<double> sm = zeros<double>(4), sg = zeros<double>(4);
  router_scores_forward(logits.data(), 1, 4, Score::softmax, sm.data());
  router_scores_forward(logits.data(), 1, 4, Score::sigmoid, sg.data());
  for (int64_t e = 0; e < 4; ++e) EXPECT_TRUE(std::isfinite(sm[e]) && std::isfinite(sg[e])) << e;
  const double z = 1.0 + std::exp(-1.0);  // only the two largest logits matter
  EXPECT_NEAR(sm[0], 1.0 / z, test::kExactAbsTol);
  EXPECT_NEAR(sm[2], std::exp(-1.0) / z, test::kExactAbsTol);
  EXPECT_EQ(sm[1], 0.0);
  EXPECT_EQ(sg[0], 1.0);
  EXPECT_EQ(sg[1], 0.0);
  EXPECT_EQ(sg[3], 0.5);
  std::vector<float> lf = cast<float>(logits), sgf = zeros<float>(4);
  router_scores_forward(lf.data(), 1, 4, Score::sigmoid, sgf.data());
  EXPECT_EQ(sgf[0], 1.0f);
  EXPECT_EQ(sgf[1], 0.0f);
}

TEST(RouterScores, BackwardMatchesCentralDifference) {
  for (Score sc : kScores) {
    for (const auto& [n, E] : kShapes) {
      Rng rng(52);
      std::vector<double> logits = rng.vec(n * E, -2.0, 2.0);
      const std::vector<double> r = rng.vec(n * E);  // loss = <r, s>
      std::vector<double> s = zeros<double>(n * E);
      auto loss = [&] {
        router_scores_forward(logits.data(), n, E, sc, s.data());
        return dot(r, s);
      };
      loss();
      std::vector<double> dl = zeros<double>(n * E);
      router_scores_backward(s.data(), r.data(), n, E, sc, dl.data());
      EXPECT_TRUE(test::gradient_matches(loss, logits, dl)) << case_name(n, E, sc);
    }
  }
}

TEST(RouterScores, BackwardAccumulates) {
  for (Score sc : kScores) {
    const int64_t n = 3, E = 5;
    Rng rng(53);
    const std::vector<double> logits = rng.vec(n * E), ds = rng.vec(n * E);
    std::vector<double> s = zeros<double>(n * E);
    router_scores_forward(logits.data(), n, E, sc, s.data());
    EXPECT_TRUE(test::backward_accumulates({n * E}, [&](std::vector<std::vector<double>>& g) {
      router_scores_backward(s.data(), ds.data(), n, E, sc, g[0].data());
    })) << case_name(n, E, sc);
  }
}

// ---- top-k ----

std::vector<int64_t> topk(const std::vector<double>& s, const std::vector<double>* bias, int64_t n, int64_t E,
                          int64_t K) {
  std::vector<int64_t> chosen(static_cast<size_t>(n * K), -1);
  topk_select(s.data(), bias ? bias->data() : nullptr, n, E, K, chosen.data());
  return chosen;
}

TEST(TopK, TiesGoToLowerIndexAndOrderIsDescending) {
  const std::vector<double> s = {0.5, 0.5, 0.2, 0.5, 0.9};  // (1, 5)
  EXPECT_EQ(topk(s, nullptr, 1, 5, 1), (std::vector<int64_t>{4}));
  EXPECT_EQ(topk(s, nullptr, 1, 5, 2), (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(topk(s, nullptr, 1, 5, 3), (std::vector<int64_t>{4, 0, 1}));
  EXPECT_EQ(topk(s, nullptr, 1, 5, 5), (std::vector<int64_t>{4, 0, 1, 3, 2}));
  EXPECT_EQ(topk(s, nullptr, 1, 5, 0), (std::vector<int64_t>{}));
  const std::vector<double> all_equal(4, 0.25);
  EXPECT_EQ(topk(all_equal, nullptr, 1, 4, 4), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(TopK, BiasSelectsAndCanCreateTies) {
  const std::vector<double> s = {0.1, 0.4, 0.3};  // (1, 3)
  const std::vector<double> big_bias = {1.0, 0.0, -1.0};
  EXPECT_EQ(topk(s, &big_bias, 1, 3, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(topk(s, &big_bias, 1, 3, 3), (std::vector<int64_t>{0, 1, 2}));
  const std::vector<double> order_bias = {0.25, 0.0, 0.125};  // values 0.35, 0.4, 0.425 -> 2, 1, 0
  EXPECT_EQ(topk(s, &order_bias, 1, 3, 3), (std::vector<int64_t>{2, 1, 0}));
  const std::vector<double> s2 = {0.25, 0.5, 0.75};        // exact binary fractions
  const std::vector<double> exact_tie = {0.5, 0.25, 0.0};  // values 0.75, 0.75, 0.75: index order
  EXPECT_EQ(topk(s2, &exact_tie, 1, 3, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(topk(s2, nullptr, 1, 3, 2), (std::vector<int64_t>{2, 1}));  // the bias did change the choice
  const std::vector<double> zero_bias(3, 0.0);
  EXPECT_EQ(topk(s, &zero_bias, 1, 3, 3), topk(s, nullptr, 1, 3, 3));
}

TEST(TopK, MatchesStableSortOnRandomRowsWithTies) {
  const int64_t n = 50, E = 7;
  Rng rng(54);
  std::vector<double> s(n * E), bias(E);
  for (double& x : s) x = static_cast<double>(rng.index(4)) / 4.0;  // few distinct values: many ties
  for (double& b : bias) b = static_cast<double>(rng.index(3)) / 8.0;
  for (int64_t K : {int64_t{1}, int64_t{3}, E}) {
    const std::vector<int64_t> chosen = topk(s, &bias, n, E, K);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> idx(E);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
        return s[i * E + a] + bias[a] > s[i * E + b] + bias[b];
      });
      for (int64_t k = 0; k < K; ++k) EXPECT_EQ(chosen[i * K + k], idx[k]) << "row " << i << " K " << K;
    }
  }
}

TEST(TopK, KLargerThanEThrowsAndEmptyInputIsFine) {
  const std::vector<double> s = {0.5, 0.5};
  std::vector<int64_t> chosen(3);
  EXPECT_THROW(topk_select(s.data(), static_cast<const double*>(nullptr), 1, 2, 3, chosen.data()), Error);
  EXPECT_NO_THROW(topk_select(s.data(), static_cast<const double*>(nullptr), 0, 2, 2, chosen.data()));
}

// ---- route weights ----

TEST(RouteWeights, ForwardNormalisesThenScales) {
  const std::vector<double> s = {0.1, 0.2, 0.3, 0.4};  // (1, 4)
  const std::vector<int64_t> chosen = {3, 1};           // (1, 2)
  std::vector<double> w(2);
  route_weights_forward(s.data(), chosen.data(), 1, 4, 2, true, 2.5, w.data());
  EXPECT_NEAR(w[0], 0.4 / 0.6 * 2.5, test::kExactAbsTol);
  EXPECT_NEAR(w[1], 0.2 / 0.6 * 2.5, test::kExactAbsTol);
  EXPECT_NEAR(w[0] + w[1], 2.5, test::kExactAbsTol);
  route_weights_forward(s.data(), chosen.data(), 1, 4, 2, false, 2.5, w.data());
  EXPECT_EQ(w, (std::vector<double>{0.4 * 2.5, 0.2 * 2.5}));
}

struct RouteCase {
  int64_t n, E, K;
  bool norm;
  double scale;
};
const std::vector<RouteCase> kRouteCases = {{1, 1, 1, true, 1.0},  {1, 1, 1, false, 2.5}, {3, 5, 2, true, 1.0},
                                            {3, 5, 2, false, 1.0}, {5, 7, 3, true, 2.5},  {4, 3, 3, true, 0.5},
                                            {2, 7, 1, false, 1.5}, {0, 4, 2, true, 1.0}};

TEST(RouteWeights, BackwardMatchesCentralDifference) {
  for (const RouteCase& c : kRouteCases) {
    Rng rng(55);
    std::vector<double> s = rng.vec(c.n * c.E, 0.05, 1.0);  // positive, like softmax/sigmoid scores
    std::vector<int64_t> chosen = topk(s, nullptr, c.n, c.E, c.K);
    const std::vector<double> r = rng.vec(c.n * c.K);  // loss = <r, w>
    auto loss = [&] {
      std::vector<double> w = zeros<double>(c.n * c.K);
      route_weights_forward(s.data(), chosen.data(), c.n, c.E, c.K, c.norm, c.scale, w.data());
      return dot(r, w);
    };
    std::vector<double> ds = zeros<double>(c.n * c.E);
    route_weights_backward(s.data(), chosen.data(), c.n, c.E, c.K, c.norm, c.scale, r.data(), ds.data());
    EXPECT_TRUE(test::gradient_matches(loss, s, ds))
        << "n=" << c.n << " E=" << c.E << " K=" << c.K << " norm=" << c.norm << " scale=" << c.scale;
  }
}

TEST(RouteWeights, BackwardAccumulates) {
  for (bool norm : {true, false}) {
    const int64_t n = 3, E = 5, K = 2;
    Rng rng(56);
    const std::vector<double> s = rng.vec(n * E, 0.05, 1.0), dw = rng.vec(n * K);
    const std::vector<int64_t> chosen = topk(s, nullptr, n, E, K);
    EXPECT_TRUE(test::backward_accumulates({n * E}, [&](std::vector<std::vector<double>>& g) {
      route_weights_backward(s.data(), chosen.data(), n, E, K, norm, 1.5, dw.data(), g[0].data());
    })) << "norm=" << norm;
  }
}

template <class T>
std::vector<std::vector<T>> run(const std::vector<double>& logits, const std::vector<double>& dw, int64_t n,
                                int64_t E, int64_t K, Score sc) {
  const std::vector<T> lt = cast<T>(logits), dwt = cast<T>(dw);
  std::vector<T> s = zeros<T>(n * E), w = zeros<T>(n * K), ds = zeros<T>(n * E), dl = zeros<T>(n * E);
  std::vector<int64_t> chosen(static_cast<size_t>(n * K));
  router_scores_forward(lt.data(), n, E, sc, s.data());
  topk_select(s.data(), static_cast<const T*>(nullptr), n, E, K, chosen.data());
  route_weights_forward(s.data(), chosen.data(), n, E, K, true, 2.0, w.data());
  route_weights_backward(s.data(), chosen.data(), n, E, K, true, 2.0, dwt.data(), ds.data());
  router_scores_backward(s.data(), ds.data(), n, E, sc, dl.data());
  return {s, w, dl, cast<T>(chosen)};
}

TEST(Router, Fp32CloseToFp64) {
  for (Score sc : kScores) {
    const int64_t n = 5, E = 7, K = 3;
    Rng rng(57);
    const auto logits = test::round_to_f32(rng.vec(n * E, -2.0, 2.0)), dw = test::round_to_f32(rng.vec(n * K));
    const auto f = run<float>(logits, dw, n, E, K, sc);
    const auto d = run<double>(logits, dw, n, E, K, sc);
    for (size_t i = 0; i + 1 < d.size(); ++i)
      EXPECT_TRUE(test::close_normwise(f[i], d[i], test::Tolerance<float>::rel)) << case_name(n, E, sc) << " #" << i;
    EXPECT_EQ(cast<double>(f.back()), d.back()) << "same experts chosen";
  }
}

}  // namespace
}  // namespace parity::router_test
