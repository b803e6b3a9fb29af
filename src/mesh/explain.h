// The text of `parity explain SCENARIO`: the mesh, each rank's coordinates in both views,
// every group (with FOLDINGS.md's table row), and for each parameter its placements and
// each rank's local shape, as Markdown tables a person can check by eye; on request
// (`--ranges`) each rank's global offset and index ranges of each parameter.
#pragma once
#include <string>

#include "mesh/mesh.h"
#include "mesh/placement.h"
#include "mesh/layout_config.h"

namespace parity::mesh {

// "TP2, EP4, ETP1" (prefixed "DPR2, " when dp_replicate > 1; ", deepspeed order" appended
// under that rank order).
std::string config_label(const Mesh& m);

// The row of FOLDINGS.md's group table for this mesh:
// "| TP2, EP4, ETP1 | {01}{23}{45}{67} | {0246}{1357} | {0123}{4567} | {04}{15}{26}{37} | singletons |"
std::string foldings_row(const Mesh& m);

// "8x16", "16", "0x16"; "()" for a scalar.
std::string compact_shape(const Shape& s);

// What explain() adds on request.
struct ExplainOptions {
  bool ranges = false;  // the index ranges table (below)
  std::string param;    // only the parameters whose name contains this ("" = every one)
};

// "[0:2, 0:16]": per tensor dimension the global index runs begin:end a rank holds, runs of
// one dimension joined by "+" (a StridedShard: "[0:2+4:6, 0:16]"), "-" where it holds none.
std::string ranges_str(const std::vector<std::vector<Range>>& ranges);

// The index ranges table: one row per (parameter, rank), with the local shape, DTensor's
// global offset (compute_local_shape_and_global_offset) and the ranges.
std::string ranges_table(const Mesh& m, const ModelConfig& model, const std::string& param_filter);

// Validates the layout for the model (validate_layout) and renders the whole explanation.
std::string explain(const LayoutConfig& layout, const ModelConfig& model, const std::string& title,
                    const ExplainOptions& options = {});

}  // namespace parity::mesh
