// The reference model of MODEL.md run by one rank of a dense layout (FSDP / HSDP over
// dp_shard x dp_replicate, TP with or without SP; routed experts sharded like the dense
// MLP). Parameters live as ShardedParams; each layer's TP-local weights are all-gathered
// over dp_shard when the layer runs (forward and again in backward) and freed after.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "parallel/sharded_param.h"
#include "parallel/tp_ops.h"

namespace parity {

struct PMicroResult {
  double ce = 0, aux = 0;                               // this rank's part (identical on TP lanes)
  std::vector<std::vector<int64_t>> chosen;             // per MoE layer (n_res, K): this lane's tokens
  std::vector<std::vector<int64_t>> counts;             // per MoE layer (E): tokens this rank counts
};

template <class T> class ParallelModel {
 public:
  ParallelModel(const Scenario& s, const mesh::Mesh& m, int rank, const TpContext& tp, const DataParallelGroups& dp,
                const std::vector<mesh::Layout>& layouts);

  std::vector<ShardedParam<T>> params;  // registry order
  std::vector<Tensor<T>> tp_grads;      // TP-local gradient accumulators (registry order)
  std::vector<std::vector<T>> expert_bias;

  void zero_grads();
  // b sequences of this rank (inputs, targets (b, S)); adds their gradient into tp_grads.
  PMicroResult forward_backward(const int64_t* inputs, const int64_t* targets, int64_t b);

  const TpContext& tp() const { return tp_; }
  const DataParallelGroups& dp() const { return dp_; }
  size_t index(const std::string& name) const { return index_.at(name); }

 private:
  struct Impl;
  ModelConfig cfg_;
  TpContext tp_;
  DataParallelGroups dp_;
  std::map<std::string, size_t> index_;
};

}  // namespace parity
