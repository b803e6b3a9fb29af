#include "mesh/param_layout.h"

#include <algorithm>
#include <string_view>

#include "core/error.h"

namespace parity::mesh {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool rowwise(const ParamSpec& spec) { return ends_with(spec.name, ".wo") || ends_with(spec.name, ".w2"); }

// FSDP's placement of tensor dimension d when `n_right` ranks to its right already shard d
// (FSDP2's _StridedShard(d, split_factor) over a TP-sharded dimension).
Placement fsdp_placement(int64_t d, int64_t n_right) {
  return n_right > 1 ? Placement::strided_shard(d, n_right) : Placement::shard(d);
}

// tp_shard_dim under this mesh: a key / value projection with fewer heads than TP lanes is
// replicated over tp (each lane reads the head its query heads share), not split inside a head.
int64_t mesh_tp_dim(const Mesh& m, const ParamSpec& spec) {
  if (spec.kv_heads > 0 && spec.kv_heads < m.size(MeshDim::tp)) return -1;
  return tp_shard_dim(spec);
}

// The extent of each dimension in this rank's model-parallel-local tensor (the largest
// piece: ceil over tp / etp, the experts over ep).
Shape mp_extents(const Mesh& m, const ParamSpec& spec) {
  Shape out = spec.shape;
  const int64_t td = mesh_tp_dim(m, spec);
  const bool routed = spec.family == Family::routed_experts;
  if (td >= 0) {
    const int64_t n = m.size(routed ? MeshDim::etp : MeshDim::tp);
    out[static_cast<size_t>(td)] = chunk(out[static_cast<size_t>(td)], n, 0).size();
  }
  if (routed && !out.empty()) out[0] = chunk(out[0], m.size(MeshDim::ep), 0).size();
  return out;
}

std::string rule_str(const FsdpDimRule& r) {
  return r.kind == FsdpDimRule::Kind::largest ? "\"largest\"" : std::to_string(r.dim);
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

int64_t fsdp_shard_dim(const Mesh& m, const ParamSpec& spec) {
  const FsdpDimRule& r = m.layout().fsdp_dim[static_cast<size_t>(spec.family)];
  const auto rank = static_cast<int64_t>(spec.shape.size());
  const std::string at = "$.layout.fsdp_dim." + std::string(family_name(spec.family));
  if (rank == 0) throw ConfigError(at, spec.name + " is a scalar: FSDP has no dimension to shard");
  if (r.kind == FsdpDimRule::Kind::largest) {
    const Shape e = mp_extents(m, spec);
    int64_t best = 0;
    for (int64_t d = 1; d < rank; ++d)
      if (e[static_cast<size_t>(d)] > e[static_cast<size_t>(best)]) best = d;
    return best;
  }
  if (r.dim < -rank || r.dim >= rank)
    throw ConfigError(at, "dim " + rule_str(r) + " is outside [" + std::to_string(-rank) + ", " +
                              std::to_string(rank) + ") for " + spec.name + " of shape " + shape_str(spec.shape) +
                              " (a bare layout.fsdp_dim applies to every family; give an object such as "
                              "{\"default\": 0, \"" + std::string(family_name(spec.family)) + "\": ...} instead)");
  return r.dim < 0 ? r.dim + rank : r.dim;
}

void check_fsdp_dim(const LayoutConfig& layout, const ModelConfig& model, const std::string& prefix) {
  if (layout.fsdp_dim == FsdpDimConfig{}) return;  // dim 0 exists in every parameter
  // The tensors' ranks do not depend on the layer count: one dense and one MoE layer hold
  // every kind (a model of a million layers is checked as fast as one of two).
  ModelConfig few = model;
  few.dense_layers = std::min<int64_t>(model.dense_layers, 1);
  few.layers = few.dense_layers + std::min<int64_t>(model.moe_layers(), 1);
  const Mesh m(layout);
  for (const ParamSpec& spec : param_specs(few)) {
    try {
      (void)fsdp_shard_dim(m, spec);
    } catch (const ConfigError& e) {
      const std::string at = e.path();
      throw ConfigError(prefix + at.substr(std::string("$.layout.").size()), e.rule());
    }
  }
}

int64_t param_layer(const ParamSpec& spec) {
  if (spec.name.rfind("layers.", 0) != 0) return -1;
  return std::stoll(spec.name.substr(7, spec.name.find('.', 7) - 7));
}

std::vector<int64_t> param_stages(const Mesh& m, const ParamSpec& spec) {
  const int64_t last = m.stages() - 1;
  if (last == 0) return {};
  if (const int64_t l = param_layer(spec); l >= 0) return {m.stage_of_layer(l)};
  if (spec.name == "embed.weight") return spec.also_head ? std::vector<int64_t>{0, last} : std::vector<int64_t>{0};
  return {last};  // final_ln, lm_head
}

TensorLayout fsdp_layout(const Mesh& m, const ParamSpec& spec) {
  const int64_t td = mesh_tp_dim(m, spec);
  const int64_t fd = fsdp_shard_dim(m, spec);
  const Placement t = td < 0 ? Placement::replicate() : Placement::shard(td);
  if (spec.family == Family::routed_experts) {
    const int64_t right = (fd == 0 ? m.size(MeshDim::ep) : 1) * (fd == td ? m.size(MeshDim::etp) : 1);
    return {View::expert, {Placement::replicate(), fsdp_placement(fd, right), Placement::shard(0), t},
            param_stages(m, spec)};
  }
  const int64_t right = td == fd ? m.size(MeshDim::tp) : 1;
  // cp: replicated (context-parallel ranks hold the same parameters; FSDP shards over
  // dp_shard only, docs/parallel.md)
  return {View::dense, {Placement::replicate(), fsdp_placement(fd, right), Placement::replicate(), t},
          param_stages(m, spec)};
}

ParamPlacements param_placements(const Mesh& m, const ParamSpec& spec) {
  const DpSharding s = spec.family == Family::routed_experts ? m.layout().expert_dp_sharding : m.layout().dp_sharding;
  const TensorLayout fsdp = fsdp_layout(m, spec);
  TensorLayout whole = fsdp;
  whole.placements[1] = Placement::replicate();  // dp_shard / edp_shard
  switch (s) {
    case DpSharding::fsdp: return {fsdp, fsdp, fsdp};
    case DpSharding::ddp: return {whole, whole, whole};
    case DpSharding::zero1: return {whole, whole, fsdp};
    case DpSharding::zero2: return {whole, fsdp, fsdp};
  }
  throw Error("param_placements: unknown dp_sharding");
}

TensorLayout param_layout(const Mesh& m, const ParamSpec& spec) { return param_placements(m, spec).param; }

}  // namespace parity::mesh
