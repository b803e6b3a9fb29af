// The rules a layout must meet for the parallel runner to run a model: validate_layout's (mesh/layout_config.h)
// (heads % tp, experts % ep, any etp that tiles the world, sequence parallel) and a batch of at
// least one sequence per micro-batch (model/batch_split.h; any batch splits over the
// data-parallel ranks, a rank may get no sequence). One implementation, run in three places:
// validate_scenario (so `parity run` refuses a file once, before any rank starts, naming the
// file and the JSON path), the scenario's resume layout, and ParallelRun on every rank (a
// scenario built in code).
#pragma once
#include "mesh/layout_config.h"

namespace parity {

// Throws ConfigError("$.layout.<field>" or "$.model.<field>", rule).
void check_supported(const ModelConfig& model, const LayoutConfig& layout);

}  // namespace parity
