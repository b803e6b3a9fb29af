#include "ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/accumulate.h"
#include "common/compare.h"
#include "common/finite_diff.h"
#include "common/random.h"
#include "common/tolerance.h"

namespace parity::rope_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::dot;
using test::Rng;
using test::zeros;

struct Shape {
  int64_t n, H, Dh;
};
// Sizes 0 and 1, one pair per head (Dh 2), several heads, odd row counts.
const std::vector<Shape> kShapes = {{1, 1, 2}, {3, 2, 2}, {4, 1, 6}, {5, 3, 4}, {0, 2, 4}, {2, 0, 4}, {3, 2, 0}};

std::string shape_name(const Shape& s) {
  return "n=" + std::to_string(s.n) + " H=" + std::to_string(s.H) + " Dh=" + std::to_string(s.Dh);
}

// Positions 0, 3, 6, ...: spread over the angles, not only the first few.
std::vector<int64_t> spread_positions(int64_t n) {
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = 3 * i + 1;
  return pos;
}

struct Table {
  std::vector<double> cos, sin;
};
Table table(const std::vector<int64_t>& pos, int64_t Dh, double theta) {
  const auto n = static_cast<int64_t>(pos.size());
  Table t{zeros<double>(n * (Dh / 2)), zeros<double>(n * (Dh / 2))};
  rope_table(pos.data(), n, Dh, theta, t.cos.data(), t.sin.data());
  return t;
}

// The table written out from its definition: angle = pos / theta^(2f / Dh) (a division where the op
// multiplies by the inverse: equal to the last bits).
TEST(Rope, TableIsTheRotaryAngles) {
  const std::vector<int64_t> pos = {0, 1, 5, 17};
  const int64_t Dh = 6;
  const double theta = 500000.0;
  const Table t = table(pos, Dh, theta);
  for (size_t i = 0; i < pos.size(); ++i)
    for (int64_t f = 0; f < Dh / 2; ++f) {
      const double angle = static_cast<double>(pos[i]) / std::pow(theta, 2.0 * static_cast<double>(f) / Dh);
      EXPECT_NEAR(t.cos[i * 3 + static_cast<size_t>(f)], std::cos(angle), test::kExactAbsTol) << i << " " << f;
      EXPECT_NEAR(t.sin[i * 3 + static_cast<size_t>(f)], std::sin(angle), test::kExactAbsTol) << i << " " << f;
    }
  EXPECT_EQ(t.cos[0], 1.0);  // position 0: no rotation
  EXPECT_EQ(t.sin[0], 0.0);
}

// A rotation: each pair (f, f + F) keeps its length, and position 0 leaves x unchanged; the
// pairing is the half split (f with f + F), not adjacent columns.
TEST(Rope, RotatesPairsHalfApartAndKeepsTheirLength) {
  const int64_t n = 3, H = 2, Dh = 4, F = 2, W = H * Dh;
  Rng rng(40);
  const std::vector<double> x = rng.vec(n * W);
  const std::vector<int64_t> pos = {0, 2, 7};
  const Table t = table(pos, Dh, 10000.0);
  std::vector<double> y = zeros<double>(n * W);
  rope_forward(x.data(), t.cos.data(), t.sin.data(), n, H, Dh, y.data());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t f = 0; f < F; ++f) {
      const int64_t a = h * Dh + f, b = a + F;
      EXPECT_EQ(y[a], x[a]);  // row 0: position 0
      EXPECT_EQ(y[b], x[b]);
      for (int64_t i = 1; i < n; ++i) {
        const double ang = static_cast<double>(pos[i]) / std::pow(10000.0, 2.0 * f / Dh);
        const double xa = x[i * W + a], xb = x[i * W + b];
        EXPECT_NEAR(y[i * W + a], xa * std::cos(ang) - xb * std::sin(ang), test::kExactAbsTol);
        EXPECT_NEAR(y[i * W + b], xb * std::cos(ang) + xa * std::sin(ang), test::kExactAbsTol);
        EXPECT_NEAR(std::hypot(y[i * W + a], y[i * W + b]), std::hypot(xa, xb), test::kExactAbsTol);
      }
    }
}

TEST(Rope, InPlaceEqualsOutOfPlace) {
  const int64_t n = 4, H = 3, Dh = 6;
  Rng rng(41);
  std::vector<double> x = rng.vec(n * H * Dh), y = zeros<double>(n * H * Dh);
  const Table t = table(spread_positions(n), Dh, 10000.0);
  rope_forward(x.data(), t.cos.data(), t.sin.data(), n, H, Dh, y.data());
  rope_forward(x.data(), t.cos.data(), t.sin.data(), n, H, Dh, x.data());
  EXPECT_EQ(x, y);
}

TEST(Rope, BackwardMatchesCentralDifference) {
  for (const Shape& s : kShapes) {
    const int64_t W = s.H * s.Dh;
    Rng rng(42);
    std::vector<double> x = rng.vec(s.n * W);
    const std::vector<double> r = rng.vec(s.n * W);  // loss = <r, y>
    const Table t = table(spread_positions(s.n), s.Dh, 10000.0);
    std::vector<double> y = zeros<double>(s.n * W);
    auto loss = [&] {
      rope_forward(x.data(), t.cos.data(), t.sin.data(), s.n, s.H, s.Dh, y.data());
      return dot(r, y);
    };
    loss();
    std::vector<double> dx = zeros<double>(s.n * W);
    rope_backward(r.data(), t.cos.data(), t.sin.data(), s.n, s.H, s.Dh, dx.data());
    EXPECT_TRUE(test::gradient_matches(loss, x, dx)) << shape_name(s);
  }
}

TEST(Rope, BackwardAccumulates) {
  const int64_t n = 3, H = 2, Dh = 4;
  Rng rng(43);
  const std::vector<double> dy = rng.vec(n * H * Dh);
  const Table t = table(spread_positions(n), Dh, 10000.0);
  EXPECT_TRUE(test::backward_accumulates({n * H * Dh}, [&](std::vector<std::vector<double>>& g) {
    rope_backward(dy.data(), t.cos.data(), t.sin.data(), n, H, Dh, g[0].data());
  }));
}

// Positions: p0 + r % rows per sequence; Rope's apply / undo are the op with that table.
TEST(Rope, PositionsAndTheModelsHelper) {
  EXPECT_EQ(rope_positions(2, 3, 0), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(rope_positions(2, 2, 4), (std::vector<int64_t>{4, 5, 4, 5}));
  const int64_t H = 2, Dh = 4;
  const auto pos = rope_positions(2, 3, 2);
  const Table t = table(pos, Dh, 1000.0);
  Rng rng(44);
  const std::vector<double> x = rng.vec(6 * H * Dh), dy = rng.vec(6 * H * Dh);
  std::vector<double> y = zeros<double>(6 * H * Dh), dx = zeros<double>(6 * H * Dh);
  rope_forward(x.data(), t.cos.data(), t.sin.data(), 6, H, Dh, y.data());
  rope_backward(dy.data(), t.cos.data(), t.sin.data(), 6, H, Dh, dx.data());
  const Rope<double> rope(pos, H, Dh, 1000.0);
  Buffer<double> xb = to_buffer(x);
  rope.apply(xb);
  EXPECT_EQ(to_vector(xb), y);
  EXPECT_EQ(to_vector(rope.undo(to_buffer(dy))), dx);
}

TEST(Rope, Fp32CloseToFp64) {
  const int64_t n = 5, H = 2, Dh = 6, W = H * Dh;
  Rng rng(45);
  const auto x = test::round_to_f32(rng.vec(n * W)), dy = test::round_to_f32(rng.vec(n * W));
  const auto pos = spread_positions(n);
  std::vector<float> cf(n * 3), sf(n * 3), yf = zeros<float>(n * W), dxf = zeros<float>(n * W);
  rope_table(pos.data(), n, Dh, 10000.0, cf.data(), sf.data());
  const auto xf = cast<float>(x), dyf = cast<float>(dy);
  rope_forward(xf.data(), cf.data(), sf.data(), n, H, Dh, yf.data());
  rope_backward(dyf.data(), cf.data(), sf.data(), n, H, Dh, dxf.data());
  const Table t = table(pos, Dh, 10000.0);
  std::vector<double> y = zeros<double>(n * W), dx = zeros<double>(n * W);
  rope_forward(x.data(), t.cos.data(), t.sin.data(), n, H, Dh, y.data());
  rope_backward(dy.data(), t.cos.data(), t.sin.data(), n, H, Dh, dx.data());
  EXPECT_TRUE(test::close_normwise(yf, y, test::Tolerance<float>::rel));
  EXPECT_TRUE(test::close_normwise(dxf, dx, test::Tolerance<float>::rel));
}

}  // namespace
}  // namespace parity::rope_test
