#include "ops/attention.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"

namespace parity::attention_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::dot;
using test::Rng;
using test::zeros;

using Shape3 = std::array<int64_t, 3>;  // (S, H, Dh)
const std::vector<Shape3> kShapes = {{1, 1, 1}, {3, 1, 2}, {5, 2, 3}, {4, 3, 1}, {2, 1, 7}, {0, 2, 2}};

std::string shape_name(const Shape3& s) {
  return "S=" + std::to_string(s[0]) + " H=" + std::to_string(s[1]) + " Dh=" + std::to_string(s[2]);
}

// Independent formula: full (S, S) scores with -inf above the diagonal, softmax via
// exp(score) / sum (no max shift; fine for O(1) inputs), then P·V. Returns {out, probs}.
std::vector<std::vector<double>> naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                                 const std::vector<double>& v, int64_t S, int64_t H, int64_t Dh) {
  const int64_t W = H * Dh;
  std::vector<double> out(S * W, 0.0), probs(H * S * S, 0.0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> e(S);
      double z = 0.0;
      for (int64_t j = 0; j < S; ++j) {
        double sc = -std::numeric_limits<double>::infinity();
        if (j <= i) {
          sc = 0.0;
          for (int64_t d = 0; d < Dh; ++d) sc += q[i * W + h * Dh + d] * k[j * W + h * Dh + d] / std::sqrt(Dh);
        }
        e[j] = std::exp(sc);
        z += e[j];
      }
      for (int64_t j = 0; j < S; ++j) {
        probs[(h * S + i) * S + j] = e[j] / z;
        for (int64_t d = 0; d < Dh; ++d) out[i * W + h * Dh + d] += e[j] / z * v[j * W + h * Dh + d];
      }
    }
  return {out, probs};
}

TEST(Attention, ForwardMatchesNaiveFormula) {
  for (const Shape3& s : kShapes) {
    const auto [S, H, Dh] = s;
    Rng rng(40);
    const std::vector<double> q = rng.vec(S * H * Dh), k = rng.vec(S * H * Dh), v = rng.vec(S * H * Dh);
    std::vector<double> out = zeros<double>(S * H * Dh), probs(H * S * S, -1.0);
    attention_forward(q.data(), k.data(), v.data(), S, H, Dh, out.data(), probs.data());
    const auto want = naive_attention(q, k, v, S, H, Dh);
    EXPECT_TRUE(test::close_normwise(out, want[0], test::Tolerance<double>::rel)) << shape_name(s);
    EXPECT_TRUE(test::close_normwise(probs, want[1], test::Tolerance<double>::rel)) << shape_name(s);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        double row = 0.0;
        for (int64_t j = 0; j < S; ++j) {
          row += probs[(h * S + i) * S + j];
          if (j > i) {
            EXPECT_EQ(probs[(h * S + i) * S + j], 0.0) << "masked entry " << h << "," << i << "," << j;
          }
        }
        EXPECT_NEAR(row, 1.0, test::kExactAbsTol);
      }
    // Token 0 attends only to itself: out[0] = v[0] exactly (probability 1).
    for (int64_t c = 0; S > 0 && c < H * Dh; ++c) EXPECT_EQ(out[c], v[c]);
  }
}

TEST(Attention, BackwardMatchesCentralDifference) {
  for (const Shape3& s : kShapes) {
    const auto [S, H, Dh] = s;
    const int64_t N = S * H * Dh;
    Rng rng(41);
    std::vector<double> q = rng.vec(N), k = rng.vec(N), v = rng.vec(N);
    const std::vector<double> r = rng.vec(N);  // loss = <r, out>
    std::vector<double> out = zeros<double>(N), probs = zeros<double>(H * S * S);
    auto loss = [&] {
      attention_forward(q.data(), k.data(), v.data(), S, H, Dh, out.data(), probs.data());
      return dot(r, out);
    };
    loss();
    std::vector<double> dq = zeros<double>(N), dk = zeros<double>(N), dv = zeros<double>(N);
    attention_backward(q.data(), k.data(), v.data(), probs.data(), r.data(), S, H, Dh, dq.data(), dk.data(),
                       dv.data());
    EXPECT_TRUE(test::gradient_matches(loss, q, dq)) << shape_name(s) << " dq";
    EXPECT_TRUE(test::gradient_matches(loss, k, dk)) << shape_name(s) << " dk";
    EXPECT_TRUE(test::gradient_matches(loss, v, dv)) << shape_name(s) << " dv";
  }
}

TEST(Attention, BackwardAccumulates) {
  const int64_t S = 4, H = 2, Dh = 3, N = S * H * Dh;
  Rng rng(42);
  const std::vector<double> q = rng.vec(N), k = rng.vec(N), v = rng.vec(N), dout = rng.vec(N);
  std::vector<double> out = zeros<double>(N), probs = zeros<double>(H * S * S);
  attention_forward(q.data(), k.data(), v.data(), S, H, Dh, out.data(), probs.data());
  EXPECT_TRUE(test::backward_accumulates({N, N, N}, [&](std::vector<std::vector<double>>& g) {
    attention_backward(q.data(), k.data(), v.data(), probs.data(), dout.data(), S, H, Dh, g[0].data(), g[1].data(),
                       g[2].data());
  }));
}

template <class T>
std::vector<std::vector<T>> run(const std::vector<double>& q, const std::vector<double>& k,
                                const std::vector<double>& v, const std::vector<double>& dout, int64_t S, int64_t H,
                                int64_t Dh) {
  const int64_t N = S * H * Dh;
  const std::vector<T> qt = cast<T>(q), kt = cast<T>(k), vt = cast<T>(v), dt = cast<T>(dout);
  std::vector<T> out = zeros<T>(N), probs = zeros<T>(H * S * S), dq = zeros<T>(N), dk = zeros<T>(N), dv = zeros<T>(N);
  attention_forward(qt.data(), kt.data(), vt.data(), S, H, Dh, out.data(), probs.data());
  attention_backward(qt.data(), kt.data(), vt.data(), probs.data(), dt.data(), S, H, Dh, dq.data(), dk.data(),
                     dv.data());
  return {out, probs, dq, dk, dv};
}

TEST(Attention, Fp32CloseToFp64) {
  const int64_t S = 5, H = 2, Dh = 3, N = S * H * Dh;
  Rng rng(43);
  const auto q = test::round_to_f32(rng.vec(N)), k = test::round_to_f32(rng.vec(N));
  const auto v = test::round_to_f32(rng.vec(N)), dout = test::round_to_f32(rng.vec(N));
  const auto f = run<float>(q, k, v, dout, S, H, Dh);
  const auto d = run<double>(q, k, v, dout, S, H, Dh);
  for (size_t i = 0; i < d.size(); ++i)
    EXPECT_TRUE(test::close_normwise(f[i], d[i], test::Tolerance<float>::rel)) << "output #" << i;
}

// Context parallel's block of query rows (attention_forward_rows): for every split of the S
// queries into a block [q0, q0 + Sq), the block's output and probabilities are the full
// attention's rows, bit for bit (the same loops in the same order), and its mask is in
// global positions.
TEST(Attention, RowBlockForwardIsTheFullRowsBitwise) {
  const int64_t S = 6, H = 2, Dh = 3, W = H * Dh;
  Rng rng(44);
  const std::vector<double> q = rng.vec(S * W), k = rng.vec(S * W), v = rng.vec(S * W);
  std::vector<double> out = zeros<double>(S * W), probs = zeros<double>(H * S * S);
  attention_forward(q.data(), k.data(), v.data(), S, H, Dh, out.data(), probs.data());
  for (int64_t q0 = 0; q0 < S; ++q0)
    for (int64_t Sq = 0; q0 + Sq <= S; ++Sq) {
      std::vector<double> o = zeros<double>(Sq * W), p(H * Sq * S, -1.0);
      attention_forward_rows(q.data() + q0 * W, k.data(), v.data(), Sq, q0, S, H, Dh, o.data(), p.data());
      for (int64_t i = 0; i < Sq * W; ++i) EXPECT_EQ(o[i], out[q0 * W + i]) << "q0 " << q0 << " Sq " << Sq;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Sq; ++i)
          for (int64_t j = 0; j < S; ++j)
            EXPECT_EQ(p[(h * Sq + i) * S + j], probs[(h * S + q0 + i) * S + j]) << h << "," << q0 + i << "," << j;
    }
}

// The block's backward against central differences of its own forward (fp64), for blocks
// that start inside the sequence: dq of the block's rows, dk and dv of every key.
TEST(Attention, RowBlockBackwardMatchesCentralDifference) {
  const int64_t S = 5, H = 2, Dh = 2, W = H * Dh;
  for (auto [q0, Sq] : std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 3}, {3, 1}, {1, 4}}) {
    Rng rng(45 + q0);
    std::vector<double> q = rng.vec(Sq * W), k = rng.vec(S * W), v = rng.vec(S * W);
    const std::vector<double> r = rng.vec(Sq * W);
    std::vector<double> out = zeros<double>(Sq * W), probs = zeros<double>(H * Sq * S);
    auto loss = [&] {
      attention_forward_rows(q.data(), k.data(), v.data(), Sq, q0, S, H, Dh, out.data(), probs.data());
      return dot(r, out);
    };
    loss();
    std::vector<double> dq = zeros<double>(Sq * W), dk = zeros<double>(S * W), dv = zeros<double>(S * W);
    attention_backward_rows(q.data(), k.data(), v.data(), probs.data(), r.data(), Sq, q0, S, H, Dh, dq.data(),
                            dk.data(), dv.data());
    EXPECT_TRUE(test::gradient_matches(loss, q, dq)) << "q0 " << q0 << " dq";
    EXPECT_TRUE(test::gradient_matches(loss, k, dk)) << "q0 " << q0 << " dk";
    EXPECT_TRUE(test::gradient_matches(loss, v, dv)) << "q0 " << q0 << " dv";
    for (int64_t j = q0 + Sq; j < S; ++j)  // keys after the block's last query get nothing
      for (int64_t c = 0; c < W; ++c) EXPECT_EQ(dk[j * W + c], 0.0) << "key " << j;
  }
}

// Split into cp blocks, the blocks' dq are the full dq's rows bitwise, and their dk, dv
// summed over the blocks equal the full ones up to summation order.
TEST(Attention, RowBlocksSumToTheFullBackward) {
  const int64_t S = 8, H = 2, Dh = 3, W = H * Dh, N = S * W;
  Rng rng(46);
  const std::vector<double> q = rng.vec(N), k = rng.vec(N), v = rng.vec(N), dout = rng.vec(N);
  std::vector<double> out = zeros<double>(N), probs = zeros<double>(H * S * S);
  attention_forward(q.data(), k.data(), v.data(), S, H, Dh, out.data(), probs.data());
  std::vector<double> dq = zeros<double>(N), dk = zeros<double>(N), dv = zeros<double>(N);
  attention_backward(q.data(), k.data(), v.data(), probs.data(), dout.data(), S, H, Dh, dq.data(), dk.data(),
                     dv.data());
  for (int64_t cp : {2, 4}) {
    const int64_t Sq = S / cp;
    std::vector<double> sk = zeros<double>(N), sv = zeros<double>(N);
    for (int64_t r = 0; r < cp; ++r) {
      std::vector<double> o = zeros<double>(Sq * W), p = zeros<double>(H * Sq * S), bq = zeros<double>(Sq * W);
      attention_forward_rows(q.data() + r * Sq * W, k.data(), v.data(), Sq, r * Sq, S, H, Dh, o.data(), p.data());
      attention_backward_rows(q.data() + r * Sq * W, k.data(), v.data(), p.data(), dout.data() + r * Sq * W, Sq, r * Sq,
                              S, H, Dh, bq.data(), sk.data(), sv.data());
      for (int64_t i = 0; i < Sq * W; ++i) EXPECT_EQ(bq[i], dq[r * Sq * W + i]) << "cp " << cp << " block " << r;
    }
    EXPECT_TRUE(test::close_normwise(sk, dk, test::Tolerance<double>::rel)) << "cp " << cp << " dk";
    EXPECT_TRUE(test::close_normwise(sv, dv, test::Tolerance<double>::rel)) << "cp " << cp << " dv";
  }
}

}  // namespace
}  // namespace parity::attention_test
