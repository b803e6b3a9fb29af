// The data split of uneven batches (model/batch_split.h): literal tables, written by hand
// from torch.tensor_split (micro-batches) and torch.chunk (data-parallel ranks).
#include "model/batch_split.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "mesh/placement.h"

namespace parity {
namespace {

std::vector<int64_t> sizes_of_micro_batches(int64_t B, int64_t M) {
  std::vector<int64_t> out;
  for (int64_t mb = 0; mb < M; ++mb) out.push_back(micro_batch_sequences(B, M, mb).size());
  return out;
}

TEST(BatchSplit, MicroBatchesAreTensorSplitAndTileTheBatch) {
  // torch.tensor_split(torch.arange(B), M): the first B % M pieces hold one more
  EXPECT_EQ(sizes_of_micro_batches(5, 2), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(sizes_of_micro_batches(5, 4), (std::vector<int64_t>{2, 1, 1, 1}));
  EXPECT_EQ(sizes_of_micro_batches(7, 3), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(sizes_of_micro_batches(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(sizes_of_micro_batches(3, 3), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(micro_batch_sequences(7, 3, 1), (SeqRange{3, 5}));
  EXPECT_EQ(micro_batch_sequences(7, 3, 2), (SeqRange{5, 7}));
}

TEST(BatchSplit, DataParallelRanksTakeTorchChunksOfEachMicroBatch) {
  // batch 5, 2 micro-batches (sequences 0-2, 3-4) over 4 ranks: chunks of 1
  const std::vector<SeqRange> mb0 = {{0, 1}, {1, 2}, {2, 3}, {3, 3}}, mb1 = {{3, 4}, {4, 5}, {5, 5}, {5, 5}};
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(dp_sequences(5, 2, 0, 4, r), mb0[static_cast<size_t>(r)]) << r;
    EXPECT_EQ(dp_sequences(5, 2, 1, 4, r), mb1[static_cast<size_t>(r)]) << r;
  }
  // torch.chunk(5 items, 4) gives 2, 2, 1 and the fourth rank nothing
  const std::vector<int64_t> want = {2, 2, 1, 0};
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(dp_sequences(5, 1, 0, 4, r).size(), want[static_cast<size_t>(r)]);
  // even: 8 over 2 micro-batches and 2 ranks, today's split
  EXPECT_EQ(dp_sequences(8, 2, 1, 2, 1), (SeqRange{6, 8}));
}

// Every (B, M, dp) up to 9 sequences and 6 ranks: each rank's range is mesh::chunk (the shard
// rule of every parameter) of its micro-batch, and the ranges, rank after rank and micro-batch
// after micro-batch, tile sequences 0 .. B-1 in order, each sequence once.
TEST(BatchSplit, EveryRankRangeIsMeshChunkOfItsMicroBatch) {
  int with_empty_rank = 0;
  for (int64_t B = 1; B <= 9; ++B)
    for (int64_t M = 1; M <= B; ++M)
      for (int64_t dp = 1; dp <= 6; ++dp) {
        int64_t next = 0;
        for (int64_t mb = 0; mb < M; ++mb) {
          const SeqRange m = micro_batch_sequences(B, M, mb);
          EXPECT_GE(m.size(), 1);
          for (int64_t r = 0; r < dp; ++r) {
            const SeqRange got = dp_sequences(B, M, mb, dp, r);
            const mesh::Range c = mesh::chunk(m.size(), dp, r);
            EXPECT_EQ(got, (SeqRange{m.begin + c.begin, m.begin + c.end}));
            EXPECT_EQ(got.begin, next) << B << " " << M << " " << dp << " " << mb << " " << r;
            next = got.end;
            with_empty_rank += got.size() == 0;
          }
        }
        EXPECT_EQ(next, B) << B << " " << M << " " << dp;
      }
  EXPECT_GT(with_empty_rank, 0);
}

TEST(BatchSplit, AnEmptyMicroBatchIsRefusedNamingTheField) {
  try {
    (void)micro_batch_sequences(3, 4, 0);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "$.model.microbatches");
    EXPECT_NE(e.rule().find("must be in [1, model.batch (3)], got 4"), std::string::npos) << e.rule();
  }
  EXPECT_THROW((void)dp_sequences(5, 2, 0, 4, 4), Error);
}

}  // namespace
}  // namespace parity
