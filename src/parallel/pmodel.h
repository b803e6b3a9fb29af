// The reference model of MODEL.md run by one rank of a layout: FSDP / HSDP over
// dp_shard x dp_replicate, TP with or without SP, routed experts over ep x etp with FSDP
// over edp_shard. Parameters live as ShardedParams; each FSDP unit's model-parallel-local
// weights (the embedding, final LayerNorm and head; each layer's dense weights; each
// layer's routed experts) are all-gathered over their FSDP group in one flat collective at
// their first use in a step and held until the next zero_grads(), the start of the next
// step: FSDP2 with reshard_after_forward=False under gradient accumulation, one gather per
// unit per step whatever the micro-batch count. A gather is an exact copy, so when it
// happens changes no value; it cut the collectives of a step by a third (docs/parallel.md).
// Activation recompute (layout.recompute, parallel/recompute.h): a recomputed part keeps only
// its input in the forward and re-runs its forward, collectives included, before its backward.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "mesh/run_config.h"
#include "model/route_oracle.h"
#include "parallel/cp_ops.h"
#include "parallel/recompute.h"
#include "parallel/ep_dispatch.h"
#include "parallel/param_plan.h"
#include "parallel/sharded_param.h"
#include "parallel/tp_ops.h"

namespace parity {

struct PMicroResult {
  double ce = 0, aux = 0;                               // this rank's part (identical on TP lanes)
  // Per MoE layer of the model (empty for a layer of another pipeline stage):
  std::vector<std::vector<int64_t>> chosen;             // (n_d, K): tokens this rank routed
  std::vector<int64_t> first_row;                       // their first row in the residual view
  std::vector<std::vector<int64_t>> counts;             // (E): assignments this rank routed
  std::vector<int64_t> followed;                        // near-ties that followed the baseline
  int64_t saved_bytes = 0;  // what the layers held for the backward when the forward ended (parallel/recompute.h)
};

// Where this rank's sequences sit in the step (model/batch_split.h); only the bug zoo's loss
// scalings read it: the correct loss is normalised by the global token count B·S alone.
struct MicroShare {
  int64_t micro_seqs = 0;  // the micro-batch's sequences over all data-parallel ranks
  int64_t dp = 1;          // dense data-parallel ranks (dp_replicate x dp_shard)
};

// One micro-batch on this rank, carried between its virtual stages under pipeline parallel
// (parallel/pipeline.h): its tokens (this rank's context-parallel chunk of each sequence), the
// stream between stages, the layers' caches and what the forwards recorded.
template <class T> struct PMicro {
  std::vector<int64_t> inputs, targets;
  int64_t b = 0, g0 = 0;  // sequences, and the first one's global index (the routing oracle's)
  MicroShare share;
  // The forward's output of the last virtual stage run (the next one's input), then, after the
  // last virtual stage's forward (which runs the head's backward too) and every backward, the
  // gradient flowing back.
  Buffer<T> h;
  std::vector<LayerCache<T>> caches;  // per model layer
  PMicroResult res;
};

// A transformer layer's parameters as indices of the plan (registry order), looked up by name
// once at construction: the forward and the backward read weights by index.
// kNoParam: a parameter the model has not (a norm's bias under RMSNorm).
inline constexpr size_t kNoParam = static_cast<size_t>(-1);
struct LayerParams {
  size_t ln1_w = 0, ln1_b = kNoParam, wq = 0, wk = 0, wv = 0, wo = 0, ln2_w = 0, ln2_b = kNoParam;
  size_t w1 = 0, w3 = 0, w2 = 0;  // the dense MLP's, or the routed experts' in an MoE layer
  size_t gate = 0, sw1 = 0, sw3 = 0, sw2 = 0;  // an MoE layer's router and shared experts (when it has them)
  size_t qn = kNoParam, kn = kNoParam;         // the QK-norm weights (model.qk_norm)
  std::vector<size_t> all;        // every parameter of the layer, registry order: its FSDP unit
};

template <class T> class ParallelModel {
 public:
  // Collective over `world`: builds the TP, EP, ETP and data-parallel groups. Each parameter's
  // storage, model-parallel chunks and stages are its plan entry's (parallel/param_plan.h).
  ParallelModel(const Scenario& s, const mesh::Mesh& m, comm::Communicator& world, const ParamPlan& plan);

  std::vector<ShardedParam<T>> params;  // registry order
  std::vector<Tensor<T>> mp_grads;      // model-parallel-local gradient accumulators (registry order)
  std::vector<Buffer<T>> expert_bias;
  // Near-tie arbitration (model/route_oracle.h): the baseline's routing of this step. No
  // oracle: route freely.
  const RouteOracle* route_oracle = nullptr;
  // fp8-delayed (core/fp8_delayed.h): the amax histories and scales of every fp8 tensor of the model
  // (replicated: every rank's is the world's after each step); off under any other policy.
  Fp8Delayed fp8;
  // The step's end under fp8-delayed (collective over the world, a no-op otherwise): the amaxes this
  // rank recorded maxed over every rank (those holding no piece of a tensor add 0), the histories
  // pushed, the next step's scales. Once per optimizer step, after the last micro-batch's backward.
  void fp8_step_done();

  // Starts a step: zeroes the gradient accumulators and drops the gathered weights (the
  // optimizer may have changed the shards since they were gathered).
  void zero_grads();
  // A micro-batch's u.b sequences of this rank (u.inputs, u.targets (b, S/cp): this rank's
  // context-parallel chunk of each, docs/parallel.md); adds their gradient into mp_grads. b may be 0 (an uneven
  // batch): the rank still joins every collective of the micro-batch (the cp ranks of one
  // data-parallel coordinate hold the same sequences, so a cp group is empty together).
  PMicroResult forward_backward(PMicro<T>& u);
  // Pipeline parallel: virtual stage v's forward and backward of one micro-batch (its layers
  // pp_stage_layers()[v]; the embedding in v = 0; the head, the loss and the head's backward at
  // the end of the last v's forward). forward_backward is both for the one virtual stage.
  void forward_chunk(PMicro<T>& u, int64_t v);
  void backward_chunk(PMicro<T>& u, int64_t v);
  int64_t virtual_stages() const { return static_cast<int64_t>(split_.size()); }
  // Rows of the residual stream per sequence on this rank (its context-parallel chunk, split
  // again over tp under sequence parallel): what a pipeline transfer moves, times dim.
  int64_t stream_rows() const { return tp_.sp && tp_.size > 1 ? cp_.chunk(cfg_.seq) / tp_.size : cp_.chunk(cfg_.seq); }
  bool held(size_t p) const { return held_[p] != 0; }  // this rank's stage holds parameter p
  // The compute copy of parameter q this rank gathered in the current step (its model-parallel-local
  // tensor as the forward and the backward read it: rounded to its plan entry's format, an fp8 weight
  // quantized), or null where it gathered none; held until the next zero_grads(). The verdict's
  // compute_copy row reads it after the step (harness/verdict/compute_copy.h).
  const Tensor<T>* compute_copy(size_t q) const { return is_gathered_[q] ? &gathered_[q] : nullptr; }

  const TpContext& tp() const { return tp_; }
  const EpContext& ep() const { return ep_; }
  const CpContext& cp() const { return cp_; }

 private:
  struct Impl;
  Impl impl_for(const PMicro<T>& u);  // pmodel.cpp
  int64_t route_g0 = 0;  // the running micro-batch's first global sequence on this rank (the oracle's)
  ModelConfig cfg_;
  Recompute recompute_ = Recompute::none;
  comm::Communicator* world_ = nullptr;  // the recomputed routing's check (recompute.h)
  comm::Communicator* fp8_world_ = nullptr;  // the whole world: fp8-delayed's amax reduction
  TpContext tp_;
  CpContext cp_;
  EpContext ep_;
  AmaxReduce tp_amax_, etp_amax_;  // fp8 (core/fp8.h): the max over the TP / ETP lanes (tp_ops.h)
  std::vector<LayerParams> layer_;     // per model layer
  size_t emb_ = 0, final_w_ = 0, final_b_ = kNoParam, head_ = 0;  // head_: lm_head's, unless tied
  std::vector<size_t> outer_;          // the embedding, final LayerNorm and head: their FSDP unit
  std::vector<Tensor<T>> gathered_;    // per parameter: its compute copy, gathered in this step
  std::vector<char> is_gathered_;      // per parameter
  std::vector<Low> compute_copy_;      // per parameter: its gathered compute copy's format (its plan entry's)
  // per parameter, its plan entry's fp8 weight quantization: whether it has one, and the amax
  // reduction over the lanes that split it (null: none)
  struct Fp8Weight {
    bool on = false;
    const AmaxReduce* amax = nullptr;
  };
  std::vector<Fp8Weight> fp8_weight_;
  std::vector<std::pair<int64_t, int64_t>> split_;  // per virtual stage: its layers
  std::vector<char> held_;                           // per parameter
};

}  // namespace parity
