// A candidate's batch split as its dump records it (issue 46 item 1): parity_torch's Collector
// writes, per step, `sequences` (N, 3) int64: (global index, dp rank, micro-batch) of every row
// a rank computed. Any split is right (DistributedSampler's strided r, r + W, ..., a shuffled
// one, packed micro-batches of other sizes) as long as every sequence of the step is taken
// exactly once; `parity compare` checks the set, not the order, and names a sequence that is
// missing, duplicated or out of the batch by its index.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace parity {

struct SplitCheck {
  std::string problem;                 // "" when every sequence is taken once; else the indices named
  std::vector<bool> micro_comparable;  // per micro-batch: it holds parity's split's sequences of that micro-batch
};

// rows: the `sequences` tensor's values, N x 3 row-major; batch and microbatches: the
// reference's. A micro-batch whose set of sequences is not the reference's has another loss
// part: its micro-batch loss is not compared (the step's loss still is).
SplitCheck check_split(const std::vector<double>& rows, int64_t batch, int64_t microbatches);

}  // namespace parity
