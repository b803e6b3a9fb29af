#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "model/data.h"

namespace parity {
namespace {

TEST(MarkovData, SequencesArePureFunctionsOfStepAndIndex) {
  MarkovData a(50, 7), b(50, 7);
  std::vector<int64_t> in(4 * 9), tg(4 * 9), in2(2 * 9), tg2(2 * 9);
  a.batch(3, 0, 4, 9, in.data(), tg.data());
  b.batch(3, 2, 2, 9, in2.data(), tg2.data());  // rows 2, 3 alone
  EXPECT_TRUE(std::equal(in2.begin(), in2.end(), in.begin() + 18));
  EXPECT_TRUE(std::equal(tg2.begin(), tg2.end(), tg.begin() + 18));
  for (int r = 0; r < 4; ++r)  // targets are the inputs shifted by one
    for (int i = 0; i + 1 < 9; ++i)
      EXPECT_EQ(tg[static_cast<size_t>(r * 9 + i)], in[static_cast<size_t>(r * 9 + i + 1)]);
  std::vector<int64_t> other(4 * 9), ot(4 * 9);
  a.batch(4, 0, 4, 9, other.data(), ot.data());
  EXPECT_NE(other, in);
}

TEST(MarkovData, TransitionsFollowTheChainWithItsProbabilities) {
  MarkovData d(30, 11);
  const auto& next = d.successors();
  const auto& prob = d.probabilities();
  ASSERT_EQ(prob.size(), 4u);
  std::map<int, int64_t> slot_count;
  int64_t total = 0;
  std::vector<int64_t> seq(201);
  for (int g = 0; g < 200; ++g) {
    d.sequence(0, g, 200, seq.data());
    for (int i = 0; i < 200; ++i) {
      const int64_t* row = &next[static_cast<size_t>(seq[static_cast<size_t>(i)] * 4)];
      auto it = std::find(row, row + 4, seq[static_cast<size_t>(i) + 1]);
      ASSERT_NE(it, row + 4) << "token " << seq[static_cast<size_t>(i) + 1] << " is not a successor";
      ++slot_count[static_cast<int>(it - row)];
      ++total;
    }
  }
  for (int k = 0; k < 4; ++k) {
    double p = prob[static_cast<size_t>(k)], se = std::sqrt(p * (1 - p) / static_cast<double>(total));
    EXPECT_NEAR(static_cast<double>(slot_count[k]) / static_cast<double>(total), p, 5 * se) << "slot " << k;
  }
}

TEST(MarkovData, EntropyFloorIsTheSuccessorEntropy) {
  MarkovData d(64, 1);
  // weights 8, 4, 2, 1 over 15
  double h = 0;
  for (double w : {8.0, 4.0, 2.0, 1.0}) h -= w / 15 * std::log(w / 15);
  EXPECT_NEAR(d.entropy_floor(), h, 1e-15);
  EXPECT_LT(d.entropy_floor(), std::log(64.0));
  MarkovData two(2, 1);  // two tokens: two successors each, weights 8 and 4
  EXPECT_NEAR(two.entropy_floor(), -(2.0 / 3 * std::log(2.0 / 3) + 1.0 / 3 * std::log(1.0 / 3)), 1e-15);
  EXPECT_THROW(MarkovData(1, 1), Error);
}

}  // namespace
}  // namespace parity
