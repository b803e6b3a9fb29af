// The layout of every model parameter under a mesh: which placements the parallel code
// (FSDP over dp_shard, TP over tp, EP/ETP for routed experts, HSDP replicas over
// dp_replicate) gives each tensor of model/params.h.
//
// Dense view (dp_replicate, dp_shard, tp):
//   colwise linears (attn wq/wk/wv, mlp/shared w1/w3, lm_head)  tp Shard(1)
//   rowwise linears (attn wo, mlp/shared w2)                    tp Shard(0)
//   vocab-parallel embedding (V, D)                             tp Shard(0)
//   LayerNorm weight/bias, router gate                          tp Replicate
//   FSDP on dp_shard shards dim 0: Shard(0), or StridedShard(0, tp) when tp > 1 shards dim 0
//   dp_replicate: Replicate
// Expert view (dp_replicate, edp_shard, ep, etp), routed experts (E, D, F) / (E, F, D):
//   ep Shard(0); etp Shard(2) for w1/w3, Shard(1) for w2;
//   edp_shard StridedShard(0, ep) (Shard(0) when ep = 1); dp_replicate Replicate.
// These are FOLDINGS.md's examples: w1 under dp_shard 4, tp 2, ep 2, etp 2 is
// (Replicate, StridedShard(0, 2), Shard(0), Shard(2)).
#pragma once
#include "mesh/mesh.h"
#include "mesh/placement.h"
#include "model/params.h"

namespace parity::mesh {

// Which tensor dimension TP (or ETP, for routed experts) shards; -1 when replicated over it.
int64_t tp_shard_dim(const ParamSpec& spec);

Layout param_layout(const Mesh& m, const ParamSpec& spec);

}  // namespace parity::mesh
