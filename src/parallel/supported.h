// The rules a layout must meet for the parallel runner to run a model: mesh::validate_layout's
// (heads % tp, experts % ep, etp in {1, tp}, sequence parallel) and a batch that splits evenly
// over micro-batches and data-parallel ranks (uneven data-parallel batches are not supported
// yet). One implementation, run in three places: validate_scenario (so `parity run` refuses a
// file once, before any rank starts, naming the file and the JSON path), the scenario's resume
// layout, and ParallelRun on every rank (a scenario built in code).
#pragma once
#include "model/config.h"

namespace parity {

// Throws ConfigError("$.layout.<field>" or "$.model.<field>", rule).
void check_supported(const ModelConfig& model, const LayoutConfig& layout);

}  // namespace parity
