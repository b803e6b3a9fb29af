// How a step's global batch of B sequences is split, first into M micro-batches, then each
// micro-batch over the dense data-parallel ranks (docs/scenario.md, "Uneven batches"). The
// one place the split is decided: the baseline takes the micro-batch ranges, every parallel
// rank its own range of each micro-batch. Both are contiguous ranges of global sequence
// indices, so a rank reads exactly its sequences (MarkovData::batch(step, begin, size)).
//
// - Micro-batches: numpy.array_split / torch.tensor_split: B div M sequences each, one more
//   for the first B mod M. With B >= M (the rule checked below) no micro-batch is empty.
// - Data parallel: torch.chunk over the micro-batch's sequences (the rule of every shard in
//   parity, mesh::chunk): chunks of ceil(n / dp), so trailing ranks may get fewer or none
//   (5 over 4: 2, 2, 1, 0). A rank with no sequence still takes part in every collective.
#pragma once
#include <cstdint>

namespace parity {

struct SeqRange {
  int64_t begin = 0, end = 0;  // global sequence indices [begin, end) of the step
  int64_t size() const { return end - begin; }
  bool operator==(const SeqRange&) const = default;
};

// Throws ConfigError("$.model.microbatches", rule) unless 1 <= microbatches <= batch.
void check_batch_split(int64_t batch, int64_t microbatches);

// Micro-batch mb's sequences (0 <= mb < microbatches).
SeqRange micro_batch_sequences(int64_t batch, int64_t microbatches, int64_t mb);

// The sequences of micro-batch mb that data-parallel rank dp_index (of dp) takes.
SeqRange dp_sequences(int64_t batch, int64_t microbatches, int64_t mb, int64_t dp, int64_t dp_index);

}  // namespace parity
