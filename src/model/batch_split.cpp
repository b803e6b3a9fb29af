#include "model/batch_split.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace parity {

void check_batch_split(int64_t batch, int64_t microbatches) {
  if (microbatches < 1 || microbatches > batch)
    throw ConfigError("$.model.microbatches",
                      "must be in [1, model.batch (" + std::to_string(batch) + ")], got " +
                          std::to_string(microbatches) +
                          ": every micro-batch holds at least one whole sequence (micro-batches split the batch "
                          "as torch.tensor_split; data-parallel ranks may get none)");
}

SeqRange micro_batch_sequences(int64_t batch, int64_t microbatches, int64_t mb) {
  check_batch_split(batch, microbatches);
  if (mb < 0 || mb >= microbatches)
    throw Error("micro_batch_sequences: micro-batch " + std::to_string(mb) + " of " + std::to_string(microbatches));
  const int64_t q = batch / microbatches, r = batch % microbatches;
  const int64_t begin = mb * q + std::min(mb, r);
  return {begin, begin + q + (mb < r ? 1 : 0)};
}

SeqRange dp_sequences(int64_t batch, int64_t microbatches, int64_t mb, int64_t dp, int64_t dp_index) {
  if (dp < 1 || dp_index < 0 || dp_index >= dp)
    throw Error("dp_sequences: data-parallel rank " + std::to_string(dp_index) + " of " + std::to_string(dp));
  const SeqRange m = micro_batch_sequences(batch, microbatches, mb);
  const int64_t c = (m.size() + dp - 1) / dp;  // torch.chunk: ceil-sized chunks, trailing ones short or empty
  return {m.begin + std::min(dp_index * c, m.size()), m.begin + std::min((dp_index + 1) * c, m.size())};
}

}  // namespace parity
