#include "parallel/supported.h"

#include <string>

#include "core/error.h"
#include "mesh/mesh.h"

namespace parity {

void check_supported(const ModelConfig& m, const LayoutConfig& l) {
  mesh::validate_layout(l, m);
  const int64_t dp = l.dp_replicate * l.dp_shard, split = m.microbatches * dp;  // world <= 2^20: no overflow
  if (m.batch % split != 0)
    throw ConfigError("$.layout.dp_shard",
                      "model.batch (" + std::to_string(m.batch) + ") must be divisible by microbatches x dp_replicate x "
                      "dp_shard (" + std::to_string(m.microbatches) + " x " + std::to_string(l.dp_replicate) + " x " +
                      std::to_string(l.dp_shard) + " = " + std::to_string(split) +
                      "): every data-parallel rank takes whole sequences of every micro-batch (uneven data-parallel "
                      "batches are not supported yet)");
}

}  // namespace parity
