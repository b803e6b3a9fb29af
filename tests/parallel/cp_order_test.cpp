// issue 47: context parallel's chunk order (cp_ops.h CpContext, layout.cp_order). The blocks of
// every rank tile the sequence once; the balanced order gives rank r chunks r and 2·cp-1-r of
// 2·cp; the local slices and the token slice take exactly those rows. (The gather, the
// reduce-scatter and the attention on the blocks are checked end to end by the cp*balanced
// scenarios against the one-device baseline.)
#include <gtest/gtest.h>

#include <vector>

#include "parallel/cp_ops.h"

namespace parity::cp_order_test {  // one namespace per file: the tests build as unity batches
namespace {

CpContext ctx(int64_t rank, int64_t size, bool balanced) { return {nullptr, rank, size, balanced}; }

TEST(CpOrder, EveryOrderTilesTheSequenceOnce) {
  for (bool balanced : {false, true})
    for (int64_t cp : {1, 2, 4}) {
      const int64_t S = 16;
      std::vector<int> seen(S, 0);
      for (int64_t r = 0; r < cp; ++r) {
        const CpContext c = ctx(r, cp, balanced);
        for (int64_t i = 0; i < c.chunk(S); ++i) ++seen[static_cast<size_t>(c.position(S, i))];
      }
      EXPECT_EQ(seen, std::vector<int>(S, 1)) << "cp " << cp << (balanced ? " balanced" : " contiguous");
    }
}

TEST(CpOrder, BalancedGivesRankRChunksRAndTheirMirror) {
  const int64_t S = 8;  // cp 2: four chunks of 2
  EXPECT_EQ(ctx(0, 2, true).positions(1, S), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(ctx(1, 2, true).positions(1, S), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(ctx(1, 2, false).positions(2, S), (std::vector<int64_t>{4, 5, 6, 7, 4, 5, 6, 7}));
  const std::vector<CpBlock> b = ctx(1, 4, true).blocks(16);  // eight chunks of 2: chunks 1 and 6
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ((std::vector<int64_t>{b[0].row, b[0].rows, b[0].pos}), (std::vector<int64_t>{0, 2, 2}));
  EXPECT_EQ((std::vector<int64_t>{b[1].row, b[1].rows, b[1].pos}), (std::vector<int64_t>{2, 2, 12}));
}

TEST(CpOrder, SlicesTakeTheRanksPositions) {
  const int64_t b = 2, S = 8, W = 3;
  std::vector<int64_t> tokens(static_cast<size_t>(b * S));
  Buffer<double> full(static_cast<size_t>(b * S * W));
  for (int64_t t = 0; t < b * S; ++t) {
    tokens[static_cast<size_t>(t)] = 100 + t;
    for (int64_t w = 0; w < W; ++w) full[static_cast<size_t>(t * W + w)] = static_cast<double>(10 * t + w);
  }
  for (bool balanced : {false, true})
    for (int64_t r = 0; r < 2; ++r) {
      const CpContext c = ctx(r, 2, balanced);
      const std::vector<int64_t> mine = cp_slice_tokens(c, tokens, b, S);
      const Buffer<double> rows = cp_slice(c, full, b, S, W);
      const std::vector<int64_t> pos = c.positions(b, S);
      ASSERT_EQ(mine.size(), pos.size());
      for (size_t i = 0; i < pos.size(); ++i) {
        const int64_t g = static_cast<int64_t>(i) / c.chunk(S) * S + pos[i];  // sequence, position
        EXPECT_EQ(mine[i], 100 + g) << "row " << i;
        for (int64_t w = 0; w < W; ++w)
          EXPECT_EQ(rows[i * W + static_cast<size_t>(w)], static_cast<double>(10 * g + w));
      }
    }
}

}  // namespace
}  // namespace parity::cp_order_test
