// layout.fsdp_dim in scenario files (docs/scenario.md): FSDP's shard dimension per
// parameter family, as PyTorch FSDP2's shard_placement_fn chooses Shard(d) per parameter.
//
//   "fsdp_dim": 1                      every family: a dimension (negative from the last)
//   "fsdp_dim": "largest"              every family: the largest model-parallel-local dim
//   "fsdp_dim": {"default": 0, "routed_experts": -1, "attention": "largest"}
//                                      per family (model/params.h names), the rest "default"
//
// Whether the dimension exists in every tensor of the family is checked against the model
// (mesh::check_fsdp_dim); this file checks the JSON's form.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mesh/layout_config.h"

namespace parity {

// Throws ConfigError at `path` (or `path.<family>`) for anything but the forms above.
FsdpDimConfig parse_fsdp_dim(const nlohmann::json& v, const std::string& path);

// The shortest JSON that parses back to `c`: nullopt for the default (dim 0 everywhere), a
// bare rule when every family has the same one, else an object with "default" (the most
// common rule, the first on a tie) and the families that differ.
std::optional<nlohmann::json> fsdp_dim_json(const FsdpDimConfig& c);

// "0", "largest", or "default 0, routed_experts -1" (for explain and reports).
std::string fsdp_dim_str(const FsdpDimConfig& c);

}  // namespace parity
