// The text of `parity explain SCENARIO`: the mesh, each rank's coordinates in both views,
// every group (with FOLDINGS.md's table row), and for each parameter its placements and
// each rank's local shape, as Markdown tables a person can check by eye.
#pragma once
#include <string>

#include "mesh/mesh.h"
#include "model/config.h"

namespace parity::mesh {

// "TP2, EP4, ETP1" (prefixed "DPR2, " when dp_replicate > 1; ", deepspeed order" appended
// under that rank order).
std::string config_label(const Mesh& m);

// The row of FOLDINGS.md's group table for this mesh:
// "| TP2, EP4, ETP1 | {01}{23}{45}{67} | {0246}{1357} | {0123}{4567} | {04}{15}{26}{37} | singletons |"
std::string foldings_row(const Mesh& m);

// "8x16", "16", "0x16"; "()" for a scalar.
std::string compact_shape(const Shape& s);

// Validates the layout for the model (validate_layout) and renders the whole explanation.
std::string explain(const LayoutConfig& layout, const ModelConfig& model, const std::string& title);

}  // namespace parity::mesh
