// The mesh's own text (the first part of `parity explain SCENARIO`, parallel/explain.h): the
// mesh, each rank's coordinates in both views, every group (with FOLDINGS.md's table row), the
// owners of each routed expert, and the labels and cells the tables are written with. Each
// parameter's placements are the parameter plan's (parallel/param_plan.h), so they are written
// by parallel/explain, above this layer.
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

// "(0, 3, 0, 1)": a rank's coordinates, an offset.
std::string tuple_str(const std::vector<int64_t>& v);

// "[0:2, 0:16]": per tensor dimension the global index runs begin:end a rank holds, runs of
// one dimension joined by "+" (a StridedShard: "[0:2+4:6, 0:16]"), "-" where it holds none.
std::string ranges_str(const std::vector<std::vector<Range>>& ranges);

// From the title to the groups: "# title", the world, its folding and both views, the rank
// order and its formula, context parallel, recompute and pipeline lines where they apply, the
// ranks' coordinates, FOLDINGS.md's row and every group. The layout is m's, validated.
std::string mesh_text(const Mesh& m, const ModelConfig& model, const std::string& title);

// The ranks holding a piece of each routed expert ("" for a model without MoE layers).
std::string expert_owners(const Mesh& m, const ModelConfig& model);

}  // namespace parity::mesh
