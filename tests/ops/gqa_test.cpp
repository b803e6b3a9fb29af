// Grouped-query / multi-query attention (model.kv_heads, issue 47): the attention op with G key /
// value heads shared by H / G query heads each (ops/attention.h AttnHeads).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"
#include "ops/attention.h"

namespace parity::gqa_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::dot;
using test::Rng;
using test::zeros;

using Shape4 = std::array<int64_t, 4>;  // (S, H, G, Dh)
const std::vector<Shape4> kShapes = {{1, 2, 1, 1}, {3, 4, 2, 2}, {5, 4, 1, 3}, {4, 3, 3, 2},
                                     {2, 6, 2, 1}, {4, 6, 3, 2}, {0, 2, 1, 2}};

std::string shape_name(const Shape4& s) {
  return "S=" + std::to_string(s[0]) + " H=" + std::to_string(s[1]) + " G=" + std::to_string(s[2]) +
         " Dh=" + std::to_string(s[3]);
}

// Independent formula: query head h reads key / value head h / (H / G); full (S, S) scores with
// -inf above the diagonal, softmax via exp / sum. Returns {out, probs}.
std::vector<std::vector<double>> naive_gqa(const std::vector<double>& q, const std::vector<double>& k,
                                           const std::vector<double>& v, int64_t S, int64_t H, int64_t G,
                                           int64_t Dh) {
  const int64_t W = H * Dh, Wk = G * Dh;
  std::vector<double> out(S * W, 0.0), probs(H * S * S, 0.0);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kh = h / (H / G);
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> e(S);
      double z = 0.0;
      for (int64_t j = 0; j < S; ++j) {
        double sc = -std::numeric_limits<double>::infinity();
        if (j <= i) {
          sc = 0.0;
          for (int64_t d = 0; d < Dh; ++d) sc += q[i * W + h * Dh + d] * k[j * Wk + kh * Dh + d] / std::sqrt(Dh);
        }
        e[j] = std::exp(sc);
        z += e[j];
      }
      for (int64_t j = 0; j < S; ++j) {
        probs[(h * S + i) * S + j] = e[j] / z;
        for (int64_t d = 0; d < Dh; ++d) out[i * W + h * Dh + d] += e[j] / z * v[j * Wk + kh * Dh + d];
      }
    }
  }
  return {out, probs};
}

// (S, G*Dh) -> (S, H*Dh): each key / value head repeated for its H / G query heads (what a
// framework's repeat_kv / repeat_interleave does before plain multi-head attention).
std::vector<double> repeat_kv(const std::vector<double>& x, int64_t S, int64_t H, int64_t G, int64_t Dh) {
  std::vector<double> out(S * H * Dh);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < Dh; ++d) out[(i * H + h) * Dh + d] = x[(i * G + h / (H / G)) * Dh + d];
  return out;
}

// The transpose of repeat_kv: each key / value head's gradient the sum of its query heads' (h order).
std::vector<double> sum_groups(const std::vector<double>& x, int64_t S, int64_t H, int64_t G, int64_t Dh) {
  std::vector<double> out(S * G * Dh, 0.0);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < Dh; ++d) out[(i * G + h / (H / G)) * Dh + d] += x[(i * H + h) * Dh + d];
  return out;
}

TEST(Gqa, ForwardMatchesNaiveFormula) {
  for (const Shape4& s : kShapes) {
    const auto [S, H, G, Dh] = s;
    Rng rng(70);
    const std::vector<double> q = rng.vec(S * H * Dh), k = rng.vec(S * G * Dh), v = rng.vec(S * G * Dh);
    std::vector<double> out = zeros<double>(S * H * Dh), probs(H * S * S, -1.0);
    attention_forward(q.data(), k.data(), v.data(), S, AttnHeads{H, G, Dh}, out.data(), probs.data());
    const auto want = naive_gqa(q, k, v, S, H, G, Dh);
    EXPECT_TRUE(test::close_normwise(out, want[0], test::Tolerance<double>::rel)) << shape_name(s);
    EXPECT_TRUE(test::close_normwise(probs, want[1], test::Tolerance<double>::rel)) << shape_name(s);
  }
}

// The independent route: plain multi-head attention on k, v repeated per query head gives the
// same output and dq bit for bit (the same loops read the same numbers), and dk, dv equal to the
// repeated heads' gradients summed per group.
TEST(Gqa, EqualsMultiHeadOnRepeatedKeysAndValues) {
  for (const Shape4& s : kShapes) {
    const auto [S, H, G, Dh] = s;
    const int64_t N = S * H * Dh, Nk = S * G * Dh;
    Rng rng(71);
    const std::vector<double> q = rng.vec(N), k = rng.vec(Nk), v = rng.vec(Nk), dout = rng.vec(N);
    std::vector<double> out = zeros<double>(N), probs = zeros<double>(H * S * S);
    std::vector<double> dq = zeros<double>(N), dk = zeros<double>(Nk), dv = zeros<double>(Nk);
    attention_forward(q.data(), k.data(), v.data(), S, AttnHeads{H, G, Dh}, out.data(), probs.data());
    attention_backward(q.data(), k.data(), v.data(), probs.data(), dout.data(), S, AttnHeads{H, G, Dh}, dq.data(),
                       dk.data(), dv.data());
    const std::vector<double> kr = repeat_kv(k, S, H, G, Dh), vr = repeat_kv(v, S, H, G, Dh);
    std::vector<double> out_r = zeros<double>(N), probs_r = zeros<double>(H * S * S);
    std::vector<double> dq_r = zeros<double>(N), dk_r = zeros<double>(N), dv_r = zeros<double>(N);
    attention_forward(q.data(), kr.data(), vr.data(), S, H, Dh, out_r.data(), probs_r.data());
    attention_backward(q.data(), kr.data(), vr.data(), probs_r.data(), dout.data(), S, H, Dh, dq_r.data(),
                       dk_r.data(), dv_r.data());
    EXPECT_EQ(out, out_r) << shape_name(s);
    EXPECT_EQ(probs, probs_r) << shape_name(s);
    EXPECT_EQ(dq, dq_r) << shape_name(s);
    EXPECT_TRUE(test::close_normwise(dk, sum_groups(dk_r, S, H, G, Dh), test::Tolerance<double>::rel))
        << shape_name(s);
    EXPECT_TRUE(test::close_normwise(dv, sum_groups(dv_r, S, H, G, Dh), test::Tolerance<double>::rel))
        << shape_name(s);
  }
}

TEST(Gqa, BackwardMatchesCentralDifference) {
  for (const Shape4& s : kShapes) {
    const auto [S, H, G, Dh] = s;
    const int64_t N = S * H * Dh, Nk = S * G * Dh;
    Rng rng(72);
    std::vector<double> q = rng.vec(N), k = rng.vec(Nk), v = rng.vec(Nk);
    const std::vector<double> r = rng.vec(N);  // loss = <r, out>
    std::vector<double> out = zeros<double>(N), probs = zeros<double>(H * S * S);
    const AttnHeads hd{H, G, Dh};
    auto loss = [&] {
      attention_forward(q.data(), k.data(), v.data(), S, hd, out.data(), probs.data());
      return dot(r, out);
    };
    loss();
    std::vector<double> dq = zeros<double>(N), dk = zeros<double>(Nk), dv = zeros<double>(Nk);
    attention_backward(q.data(), k.data(), v.data(), probs.data(), r.data(), S, hd, dq.data(), dk.data(), dv.data());
    EXPECT_TRUE(test::gradient_matches(loss, q, dq)) << shape_name(s) << " dq";
    EXPECT_TRUE(test::gradient_matches(loss, k, dk)) << shape_name(s) << " dk";
    EXPECT_TRUE(test::gradient_matches(loss, v, dv)) << shape_name(s) << " dv";
  }
}

TEST(Gqa, BackwardAccumulates) {
  const int64_t S = 4, H = 4, G = 2, Dh = 3, N = S * H * Dh, Nk = S * G * Dh;
  Rng rng(73);
  const std::vector<double> q = rng.vec(N), k = rng.vec(Nk), v = rng.vec(Nk), dout = rng.vec(N);
  std::vector<double> out = zeros<double>(N), probs = zeros<double>(H * S * S);
  attention_forward(q.data(), k.data(), v.data(), S, AttnHeads{H, G, Dh}, out.data(), probs.data());
  EXPECT_TRUE(test::backward_accumulates({N, Nk, Nk}, [&](std::vector<std::vector<double>>& g) {
    attention_backward(q.data(), k.data(), v.data(), probs.data(), dout.data(), S, AttnHeads{H, G, Dh}, g[0].data(),
                       g[1].data(), g[2].data());
  }));
}

// G = H is the multi-head op: the same bits as the (H, Dh) signature every shipped scenario runs.
TEST(Gqa, AllHeadsIsMultiHeadBitForBit) {
  const int64_t S = 5, H = 2, Dh = 3, N = S * H * Dh;
  Rng rng(74);
  const std::vector<double> q = rng.vec(N), k = rng.vec(N), v = rng.vec(N), dout = rng.vec(N);
  std::vector<double> o1 = zeros<double>(N), p1 = zeros<double>(H * S * S), o2 = o1, p2 = p1;
  attention_forward(q.data(), k.data(), v.data(), S, H, Dh, o1.data(), p1.data());
  attention_forward(q.data(), k.data(), v.data(), S, AttnHeads{H, H, Dh}, o2.data(), p2.data());
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(p1, p2);
}

// Context parallel's blocks of query rows: the rows' outputs are the full call's, and their dk,
// dv parts add up to the full call's (each block over its own queries).
TEST(Gqa, RowBlocksSumToTheWholeSequence) {
  const int64_t S = 6, H = 4, G = 2, Dh = 2, W = H * Dh, N = S * W, Nk = S * G * Dh;
  const AttnHeads hd{H, G, Dh};
  Rng rng(75);
  const std::vector<double> q = rng.vec(N), k = rng.vec(Nk), v = rng.vec(Nk), dout = rng.vec(N);
  std::vector<double> out = zeros<double>(N), probs = zeros<double>(H * S * S);
  std::vector<double> dq = zeros<double>(N), dk = zeros<double>(Nk), dv = zeros<double>(Nk);
  attention_forward(q.data(), k.data(), v.data(), S, hd, out.data(), probs.data());
  attention_backward(q.data(), k.data(), v.data(), probs.data(), dout.data(), S, hd, dq.data(), dk.data(), dv.data());
  std::vector<double> out_b = zeros<double>(N), dq_b = zeros<double>(N), dk_b = zeros<double>(Nk), dv_b = dk_b;
  for (int64_t q0 : {0, 2, 4}) {
    const int64_t Sq = 2;
    std::vector<double> p = zeros<double>(H * Sq * S);
    attention_forward_rows(q.data() + q0 * W, k.data(), v.data(), Sq, q0, S, hd, out_b.data() + q0 * W, p.data());
    attention_backward_rows(q.data() + q0 * W, k.data(), v.data(), p.data(), dout.data() + q0 * W, Sq, q0, S, hd,
                            dq_b.data() + q0 * W, dk_b.data(), dv_b.data());
  }
  EXPECT_EQ(out_b, out);
  EXPECT_EQ(dq_b, dq);
  EXPECT_TRUE(test::close_normwise(dk_b, dk, test::Tolerance<double>::rel));
  EXPECT_TRUE(test::close_normwise(dv_b, dv, test::Tolerance<double>::rel));
}

}  // namespace
}  // namespace parity::gqa_test
