#include "ops/aux_loss.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"
#include "core/error.h"
#include "ops/router.h"

namespace parity::aux_loss_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::Rng;
using test::zeros;

using Shape3 = std::array<int64_t, 3>;  // (S, E, K)
const std::vector<Shape3> kShapes = {{1, 1, 1}, {3, 5, 2}, {5, 7, 3}, {4, 3, 3}, {1, 4, 1}, {0, 4, 2}};

std::string shape_name(const Shape3& s) {
  return "S=" + std::to_string(s[0]) + " E=" + std::to_string(s[1]) + " K=" + std::to_string(s[2]);
}

std::vector<int64_t> top_k(const std::vector<double>& s, int64_t S, int64_t E, int64_t K) {
  std::vector<int64_t> chosen(static_cast<size_t>(S * K));
  topk_select(s.data(), static_cast<const double*>(nullptr), S, E, K, chosen.data());
  return chosen;
}

TEST(AuxLoss, BalancedUniformRoutingGivesOne) {
  // S = 4 tokens, E = 4, K = 2, each expert chosen by exactly 2 tokens and uniform scores:
  // f_e = 4 / (2 * 4) * 2 = 1, p_e = 1/4, sum_e f_e p_e = 1.
  const int64_t S = 4, E = 4, K = 2;
  const std::vector<double> s(S * E, 0.25);
  const std::vector<int64_t> chosen = {0, 1, 2, 3, 0, 2, 1, 3};
  EXPECT_NEAR(aux_loss_forward(s.data(), chosen.data(), S, E, K), 1.0, test::kExactAbsTol);
}

TEST(AuxLoss, ForwardMatchesFormula) {
  const int64_t S = 5, E = 6, K = 2;
  Rng rng(60);
  const std::vector<double> s = rng.vec(S * E, 0.05, 1.0);  // unnormalised (sigmoid-like) scores
  const std::vector<int64_t> chosen = top_k(s, S, E, K);
  double want = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    int64_t count = 0;
    double p = 0.0;
    for (int64_t t = 0; t < S; ++t) {
      double z = 0.0;
      for (int64_t j = 0; j < E; ++j) z += s[t * E + j];
      p += s[t * E + e] / z / S;
      for (int64_t k = 0; k < K; ++k) count += chosen[t * K + k] == e ? 1 : 0;
    }
    want += static_cast<double>(E) * static_cast<double>(count) / (K * S) * p;
  }
  const std::vector<double> got = {aux_loss_forward(s.data(), chosen.data(), S, E, K)};
  EXPECT_TRUE(test::close_normwise(got, std::vector<double>{want}, test::Tolerance<double>::rel));
  // Scaling one token's scores does not change its normalised scores, hence not the loss.
  std::vector<double> scaled = s;
  for (int64_t e = 0; e < E; ++e) scaled[2 * E + e] *= 4.0;  // power of 2: exact
  EXPECT_EQ(aux_loss_forward(scaled.data(), chosen.data(), S, E, K), got[0]);
}

TEST(AuxLoss, EmptySequenceIsZero) {
  const std::vector<double> s;
  const std::vector<int64_t> chosen;
  EXPECT_EQ(aux_loss_forward(s.data(), chosen.data(), 0, 4, 2), 0.0);
}

TEST(AuxLoss, BackwardMatchesCentralDifference) {
  for (const Shape3& sh : kShapes) {
    const auto [S, E, K] = sh;
    Rng rng(61);
    std::vector<double> s = rng.vec(S * E, 0.05, 1.0);
    const std::vector<int64_t> chosen = top_k(s, S, E, K);  // fixed: f is a count, no gradient
    const double c = rng.uniform(0.5, 2.0);                  // loss = c * aux
    auto loss = [&] { return c * aux_loss_forward(s.data(), chosen.data(), S, E, K); };
    std::vector<double> ds = zeros<double>(S * E);
    aux_loss_backward(s.data(), chosen.data(), S, E, K, c, ds.data());
    EXPECT_TRUE(test::gradient_matches(loss, s, ds)) << shape_name(sh);
  }
}

TEST(AuxLoss, BackwardAccumulates) {
  const int64_t S = 3, E = 5, K = 2;
  Rng rng(62);
  const std::vector<double> s = rng.vec(S * E, 0.05, 1.0);
  const std::vector<int64_t> chosen = top_k(s, S, E, K);
  EXPECT_TRUE(test::backward_accumulates({S * E}, [&](std::vector<std::vector<double>>& g) {
    aux_loss_backward(s.data(), chosen.data(), S, E, K, 0.7, g[0].data());
  }));
}

TEST(AuxLoss, ChosenOutOfRangeThrows) {
  const std::vector<double> s = {0.5, 0.5};
  const int64_t bad = 2;
  std::vector<double> ds(2);
  EXPECT_THROW(aux_loss_forward(s.data(), &bad, 1, 2, 1), Error);
  EXPECT_THROW(aux_loss_backward(s.data(), &bad, 1, 2, 1, 1.0, ds.data()), Error);
}

TEST(AuxLoss, Fp32CloseToFp64) {
  const int64_t S = 5, E = 7, K = 3;
  Rng rng(63);
  const std::vector<double> s = test::round_to_f32(rng.vec(S * E, 0.05, 1.0));
  const std::vector<int64_t> chosen = top_k(s, S, E, K);
  const std::vector<float> sf = cast<float>(s);
  const std::vector<double> loss = {aux_loss_forward(s.data(), chosen.data(), S, E, K)};
  const std::vector<float> lossf = {aux_loss_forward(sf.data(), chosen.data(), S, E, K)};
  std::vector<double> ds = zeros<double>(S * E);
  std::vector<float> dsf = zeros<float>(S * E);
  aux_loss_backward(s.data(), chosen.data(), S, E, K, 1.0, ds.data());
  aux_loss_backward(sf.data(), chosen.data(), S, E, K, 1.0f, dsf.data());
  EXPECT_TRUE(test::close_normwise(lossf, loss, test::Tolerance<float>::rel));
  EXPECT_TRUE(test::close_normwise(dsf, ds, test::Tolerance<float>::rel));
}

}  // namespace
}  // namespace parity::aux_loss_test
