#include "mesh/param_layout.h"

#include <string_view>

namespace parity::mesh {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool rowwise(const ParamSpec& spec) { return ends_with(spec.name, ".wo") || ends_with(spec.name, ".w2"); }

// FSDP's placement of dim 0 when `n_right` ranks to its right already shard dim 0.
Placement fsdp_dim0(int64_t n_right) {
  return n_right > 1 ? Placement::strided_shard(0, n_right) : Placement::shard(0);
}

}  // namespace

int64_t tp_shard_dim(const ParamSpec& spec) {
  switch (spec.family) {
    case Family::layernorm:
    case Family::router: return -1;
    case Family::embedding: return 0;  // vocab-parallel (V, D)
    case Family::head: return 1;       // (D, V)
    case Family::routed_experts: return rowwise(spec) ? 1 : 2;  // (E, F, D) / (E, D, F)
    case Family::attention:
    case Family::dense_mlp:
    case Family::shared_experts: return rowwise(spec) ? 0 : 1;
  }
  return -1;
}

Layout param_layout(const Mesh& m, const ParamSpec& spec) {
  const int64_t td = tp_shard_dim(spec);
  const Placement t = td < 0 ? Placement::replicate() : Placement::shard(td);
  if (spec.family == Family::routed_experts) {
    return {View::expert,
            {Placement::replicate(), fsdp_dim0(m.size(MeshDim::ep)), Placement::shard(0), t}};
  }
  const int64_t right = td == 0 ? m.size(MeshDim::tp) : 1;
  return {View::dense, {Placement::replicate(), fsdp_dim0(right), t}};
}

}  // namespace parity::mesh
