// The layout of every model parameter under a mesh: which placements the parallel code
// (FSDP over dp_shard, TP over tp, EP/ETP for routed experts, HSDP replicas over
// dp_replicate) gives each tensor of model/params.h.
//
// Dense view (dp_replicate, dp_shard, tp):
//   colwise linears (attn wq/wk/wv, mlp/shared w1/w3, lm_head)  tp Shard(1)
//   rowwise linears (attn wo, mlp/shared w2)                    tp Shard(0)
//   vocab-parallel embedding (V, D)                             tp Shard(0)
//   LayerNorm weight/bias, router gate                          tp Replicate
//   attn wk/wv with fewer KV heads than tp (model.kv_heads)      tp Replicate (a head per tp/kv lanes)
//   FSDP on dp_shard shards the family's FSDP dimension d (layout.fsdp_dim, 0 by default):
//   Shard(d), or StridedShard(d, tp) when tp > 1 also shards d
//   dp_replicate: Replicate
// Expert view (dp_replicate, edp_shard, ep, etp), routed experts (E, D, F) / (E, F, D):
//   ep Shard(0); etp Shard(2) for w1/w3, Shard(1) for w2;
//   edp_shard on the FSDP dimension d: StridedShard(d, sf) with sf the product of the sizes
//   of ep (when d = 0) and etp (when etp shards d), Shard(d) when sf = 1; dp_replicate Replicate.
// These are FOLDINGS.md's examples: w1 under dp_shard 4, tp 2, ep 2, etp 2 is
// (Replicate, StridedShard(0, 2), Shard(0), Shard(2)); with fsdp_dim 2 for routed experts
// it is (Replicate, StridedShard(2, 2), Shard(0), Shard(2)).
#pragma once
#include <string>

#include "mesh/mesh.h"
#include "mesh/placement.h"
#include "model/params.h"

namespace parity::mesh {

// Which tensor dimension TP (or ETP, for routed experts) shards; -1 when replicated over it.
int64_t tp_shard_dim(const ParamSpec& spec);

// The tensor dimension FSDP shards for this parameter under layout.fsdp_dim (its family's
// rule resolved: a negative dim counted from the last, `largest` the dimension with the most
// indices in the model-parallel-local tensor, the first of equals). Throws ConfigError when
// the rule names no dimension of the tensor.
int64_t fsdp_shard_dim(const Mesh& m, const ParamSpec& spec);

// Checks layout.fsdp_dim against every parameter of the model: each family's rule must name
// a dimension of each of its tensors. Throws ConfigError("<prefix>fsdp_dim.<family>", rule).
void check_fsdp_dim(const LayoutConfig& layout, const ModelConfig& model, const std::string& prefix = "$.layout.");

// The pipeline stages holding a parameter (empty with pp 1): embed.weight on the first (and
// the last too when it is also the head: tie_embeddings, synchronised over the embedding
// group), final_ln and lm_head on the last, a layer's parameters on its layer's stage.
std::vector<int64_t> param_stages(const Mesh& m, const ParamSpec& spec);
// The transformer layer of a parameter ("layers.3.attn.wq": 3), -1 for the others.
int64_t param_layer(const ParamSpec& spec);

// Where the parameter, its reduced gradient and its optimizer state live: the one place that
// reads layout.dp_sharding (expert_dp_sharding for routed experts), i.e. decides "is this
// sharded" (parallel/param_plan.h derives everything else from these three placements):
//   fsdp   all three FSDP's (fsdp_layout): Shard on dp_shard (edp_shard)
//   ddp    all three Replicate on dp_shard (edp_shard)
//   zero1  the parameter and its gradient replicated, the optimizer state FSDP's
//   zero2  the parameter replicated, its gradient and optimizer state FSDP's
// On param_stages.
struct ParamPlacements {
  TensorLayout param, grad, optimizer;
};
ParamPlacements param_placements(const Mesh& m, const ParamSpec& spec);
// The layout FSDP would give it whatever the mode (what a sharded one of the three is).
TensorLayout fsdp_layout(const Mesh& m, const ParamSpec& spec);
// param_placements(m, spec).param: for the mesh layer's readers (explain, synthetic checkpoints, tests).
TensorLayout param_layout(const Mesh& m, const ParamSpec& spec);

}  // namespace parity::mesh
