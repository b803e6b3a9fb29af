#include "ops/embedding.h"

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

namespace parity::embedding_test {  // one namespace per file: the tests build as unity batches
namespace {

using test::cast;
using test::dot;
using test::Rng;
using test::zeros;

using Shape3 = std::array<int64_t, 3>;  // (n, V, D)
const std::vector<Shape3> kShapes = {{1, 1, 1}, {5, 3, 7}, {3, 5, 1}, {7, 2, 3}, {0, 3, 2}, {4, 3, 0}};

std::string shape_name(const Shape3& s) {
  return "n=" + std::to_string(s[0]) + " V=" + std::to_string(s[1]) + " D=" + std::to_string(s[2]);
}

TEST(Embedding, ForwardGathersRows) {
  const std::vector<double> table = {0, 1, 10, 11, 20, 21};  // (3, 2)
  const std::vector<int64_t> ids = {2, 0, 2, 1};
  std::vector<double> out(8, -1.0);
  embedding_forward(ids.data(), 4, table.data(), 3, 2, out.data());
  EXPECT_EQ(out, (std::vector<double>{20, 21, 0, 1, 20, 21, 10, 11}));
}

TEST(Embedding, BackwardScatterAddsRepeatedIds) {
  const std::vector<int64_t> ids = {1, 1, 0};
  const std::vector<double> dout = {1, 2, 10, 20, 100, 200};  // (3, 2)
  std::vector<double> dtable(6, 0.5);                        // (3, 2)
  embedding_backward(ids.data(), 3, dout.data(), 3, 2, dtable.data());
  EXPECT_EQ(dtable, (std::vector<double>{100.5, 200.5, 11.5, 22.5, 0.5, 0.5}));
}

TEST(Embedding, BackwardMatchesCentralDifference) {
  for (const Shape3& s : kShapes) {
    const auto [n, V, D] = s;
    Rng rng(30);
    std::vector<double> table = rng.vec(V * D);
    const std::vector<int64_t> ids = rng.indices(n, V);  // n > V: repeated ids
    const std::vector<double> r = rng.vec(n * D);         // loss = <r, out>
    auto loss = [&] {
      std::vector<double> out = zeros<double>(n * D);
      embedding_forward(ids.data(), n, table.data(), V, D, out.data());
      return dot(r, out);
    };
    std::vector<double> dtable = zeros<double>(V * D);
    embedding_backward(ids.data(), n, r.data(), V, D, dtable.data());
    EXPECT_TRUE(test::gradient_matches(loss, table, dtable)) << shape_name(s);
  }
}

TEST(Embedding, BackwardAccumulates) {
  const int64_t n = 5, V = 3, D = 4;
  Rng rng(31);
  const std::vector<int64_t> ids = rng.indices(n, V);
  const std::vector<double> dout = rng.vec(n * D);
  EXPECT_TRUE(test::backward_accumulates({V * D}, [&](std::vector<std::vector<double>>& g) {
    embedding_backward(ids.data(), n, dout.data(), V, D, g[0].data());
  }));
}

TEST(Embedding, IdOutOfRangeThrows) {
  const std::vector<double> table = {1, 2};  // (2, 1)
  std::vector<double> out(1), dtable(2);
  for (int64_t bad : {int64_t{-1}, int64_t{2}}) {
    EXPECT_THROW(embedding_forward(&bad, 1, table.data(), 2, 1, out.data()), Error);
    EXPECT_THROW(embedding_backward(&bad, 1, out.data(), 2, 1, dtable.data()), Error);
  }
}

TEST(Embedding, Fp32MatchesFp64) {
  const int64_t n = 6, V = 4, D = 3;
  Rng rng(32);
  const std::vector<double> table = test::round_to_f32(rng.vec(V * D)), dout = test::round_to_f32(rng.vec(n * D));
  const std::vector<int64_t> ids = rng.indices(n, V);
  std::vector<double> out = zeros<double>(n * D), dtable = zeros<double>(V * D);
  embedding_forward(ids.data(), n, table.data(), V, D, out.data());
  embedding_backward(ids.data(), n, dout.data(), V, D, dtable.data());
  const std::vector<float> tf = cast<float>(table), df = cast<float>(dout);
  std::vector<float> outf = zeros<float>(n * D), dtf = zeros<float>(V * D);
  embedding_forward(ids.data(), n, tf.data(), V, D, outf.data());
  embedding_backward(ids.data(), n, df.data(), V, D, dtf.data());
  EXPECT_TRUE(test::bitwise_equal(cast<double>(outf), out));  // a copy is exact
  EXPECT_TRUE(test::close_normwise(dtf, dtable, test::Tolerance<float>::rel));
}

}  // namespace
}  // namespace parity::embedding_test
