// The text of `parity explain SCENARIO`: the mesh, each rank's coordinates in both views, every
// group (mesh/mesh_text.h), then each parameter's placements and each rank's local shape, read
// from the parameter plan (parallel/param_plan.h), the owners of the routed experts, and on
// request (`--ranges`) each rank's global offset and index ranges of each parameter; last the
// plan itself (each family's reductions, each parameter's entry) and, under pipeline parallel,
// the schedule. Markdown tables a person can check by eye.
#pragma once
#include <string>

#include "mesh/layout_config.h"
#include "model/config.h"

namespace parity {

// What explain() adds on request.
struct ExplainOptions {
  bool ranges = false;  // the index ranges table: one row per (parameter, rank), with the local
                        // shape, DTensor's global offset and the ranges (mesh_text.h ranges_str)
  std::string param;    // only the parameters whose name contains this ("" = every one)
};

// Renders the whole explanation of a validated layout (mesh/layout_config.h validate: the one check
// of the process; `parity explain` gets it from validate_scenario).
std::string explain(const ValidLayout& valid, const ModelConfig& model, const std::string& title,
                    const ExplainOptions& options = {});

}  // namespace parity
