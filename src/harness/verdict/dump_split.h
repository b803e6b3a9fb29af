// A candidate's batch split as its dump records it (issue 46 item 1): parity_torch's Collector
// writes, per step, `sequences` (N, 3) int64: (global index, dp rank, micro-batch) of every row
// a rank computed. Any split is right (DistributedSampler's strided r, r + W, ..., a shuffled
// one, packed micro-batches of other sizes) as long as every sequence of the step is taken
// exactly once; `parity compare` checks the set, not the order, and names a sequence that is
// missing, duplicated or out of the batch by its index. Also the record of the replicas.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity {

struct SplitCheck {
  std::string problem;                 // "" when every sequence is taken once; else the indices named
  std::vector<bool> micro_comparable;  // per micro-batch: it holds parity's split's sequences of that micro-batch
  std::vector<std::vector<int64_t>> taken;  // [dp rank][micro-batch]: the sequences it computed
};

// rows: the `sequences` tensor's values, N x 3 row-major; batch and microbatches: the
// reference's. A micro-batch whose set of sequences is not the reference's has another loss
// part: its micro-batch loss is not compared (the step's loss still is).
SplitCheck check_split(const std::vector<double>& rows, int64_t batch, int64_t microbatches);

// Every rank's copies (issue 46 item 2): the Collector's step record "replicas" in the
// manifest, {"ranks": W, "tensors": n, "differ": [{"rank", "what", "tensors", "first"}]}: each
// rank's gradients (after the reduction) and parameters digested and held to rank 0's, bit for
// bit. Returns the copies that differ, as the replicas row names them ("rank 1's params (1
// tensor, first embed.weight)"), and sets `pairs` to the tensor copies compared. Throws
// ConfigError naming `where` when the record is not of that form.
std::vector<std::string> replica_differences(const nlohmann::json& rec, const std::string& where, int64_t& pairs);

// Every rank's clip coefficient (issue 46e): the Collector's step record "clip_coefs", one
// measured <g after, g before> / |g before|^2 per rank (null: that rank had none to measure).
// When two ranks' differ by more than `bound` (relative), the clip was not one global
// coefficient: "rank 0 clipped by 0.61, rank 1 by 0.72 (the reference by 0.52): ...", naming a
// clip by each rank's own (local shards') norm; "" otherwise. ConfigError naming `where` when
// the record is not an array of numbers and nulls.
std::string clip_by_rank(const nlohmann::json& rec, const std::string& where, double ref_clip, double bound);

}  // namespace parity
