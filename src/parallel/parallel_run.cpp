// One rank's run of a dense layout: data split over dense DP, micro-batches, TP/SP model,
// reductions by family, global-norm clipping counting each element once, the optimizer on
// shards, the expert-bias update from global counts.
#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <stdexcept>

#include "core/error.h"
#include "model/batch_split.h"
#include "model/data.h"
#include "optim/optimizer.h"
#include "parallel/parallel_run.h"

#include "core/inject.h"
#include "core/precision.h"
#include "ops/elementwise.h"
#include "parallel/pipeline.h"
#include "parallel/pmodel.h"
#include "parallel/param_plan.h"

namespace parity {

template <class T> struct ParallelRun<T>::Impl {
  // pp_embedding_synced_after_dp (a zoo mutation): each tied entry's partner gradient before its DP reduction
  using Partners = std::vector<std::pair<size_t, Tensor<T>>>;
  Impl(const Scenario& s, comm::Communicator& w, const ValidLayout* valid)
      : sc(s), world(w), mesh(s.layout, s.model.layers), data(s.model.vocab, s.data_seed) {
    if (valid == nullptr) (void)validate(s.layout, s.model);  // a scenario built in code
    else if (layout_json(valid->config(), LayoutRecord::scenario) != layout_json(s.layout, LayoutRecord::scenario))
      throw std::logic_error("ParallelRun: the validated layout is not the scenario's");
    plan = with_injected(param_plan(mesh, s.model, s.model.precision()));  // the zoo's bugs read here, once
    for (const ParamEntry& e : plan.entries) {  // the readers' vectors (the verdict's, the checkpoint's)
      specs.push_back(e.spec);
      layouts.push_back(e.param), grad_layouts.push_back(e.grad), opt_layouts.push_back(e.optimizer);
    }
    const int r = w.rank();
    model = std::make_unique<ParallelModel<T>>(s, mesh, w, plan);
    tp = model->tp();
    dense_dp = &mesh::comm_group(w, mesh, mesh::GroupKind::dense_dp);
    ep_group = &mesh::comm_group(w, mesh, mesh::GroupKind::ep);
    dp_index = mesh.coord(mesh::MeshDim::dp_replicate, r) * mesh.size(mesh::MeshDim::dp_shard) +
               mesh.coord(mesh::MeshDim::dp_shard, r);
    dp_size = mesh.size(mesh::MeshDim::dp_replicate) * mesh.size(mesh::MeshDim::dp_shard);
    build_zero(s.seed);
    if (mesh.stages() > 1) {
      order = pipeline_order(s.layout.pp_schedule, s.layout.pp, s.layout.pp_virtual, s.model.microbatches);
      pp_group = &mesh::comm_group(w, mesh, mesh::GroupKind::pp);
    }
    std::vector<ParamSpec> local_specs = specs;
    for (size_t p = 0; p < specs.size(); ++p)
      local_specs[p].shape = zero[p] ? zero[p]->local.shape : model->params[p].local.shape;
    opt = std::make_unique<Optimizer<T>>(s.optim, local_specs);
    local_specs_ = local_specs;
    if (scales_loss(s.model.precision())) scaler = LossScaler(s.optim.loss_scale);
  }

  Scenario sc;
  comm::Communicator& world;
  mesh::Mesh mesh;
  MarkovData data;
  std::vector<ParamSpec> specs, local_specs_;
  // every parameter's placements, storage and reductions (parallel/param_plan.h): the step executes it
  ParamPlan plan;
  // the plan's placements of each parameter, its reduced gradient and its optimizer state
  std::vector<mesh::TensorLayout> layouts, grad_layouts, opt_layouts;
  // under zero1 / zero2 each parameter's optimizer shard: its FSDP piece over the shard group,
  // which the optimizer steps and all-gathers
  std::vector<std::optional<ShardedParam<T>>> zero;
  TpContext tp;
  comm::Communicator* dense_dp = nullptr;
  comm::Communicator* ep_group = nullptr;  // the bug zoo's expert_grads_over_dense_dp only
  int64_t dp_index = 0, dp_size = 1;  // this rank's dense data-parallel coordinate, of dp_size
  std::unique_ptr<ParallelModel<T>> model;
  std::unique_ptr<Optimizer<T>> opt;
  LossScaler scaler;  // fp16 (optim/loss_scaler.h); scale 1 otherwise
  // Pipeline parallel (parallel/pipeline.h): the global order of every stage's ops and
  // transfers, the stages of this rank's coordinates, and the pairs transfers go over.
  std::vector<PipeOp> order;
  comm::Communicator* pp_group = nullptr;
  comm::Communicator& pair(int64_t a, int64_t b) {  // this rank's coordinates on stages a and b
    const mesh::Group& g = pp_group_members();
    std::vector<int> two{g[static_cast<size_t>(a)], g[static_cast<size_t>(b)]};
    std::sort(two.begin(), two.end());
    return world.group(two);
  }
  const mesh::Group& pp_group_members() const { return pp_group->members(); }
  void run_pipeline(std::vector<PMicro<T>>& us);

  const FamilyReduction& entry(size_t p) const { return plan[p].reduction; }
  bool zero2(size_t p) const { return zero[p] && plan[p].zero2(); }
  void build_zero(uint64_t seed);
  // Whether this rank's gradient p enters the grad norm (the plan's count of replicas).
  bool counts_in_norm(size_t p) const {
    const NormCount n = entry(p).norm;
    return n == NormCount::every_replica ||
           (n == NormCount::first_replica && mesh::first_replica(mesh, grad_layouts[p], world.rank()));
  }
  // The data split: this rank's global sequences of micro-batch mb (model/batch_split.h:
  // micro-batches as torch.tensor_split, then torch.chunk over the dense data-parallel
  // ranks, so a rank may get none). The TP lanes of one data-parallel rank take the same.
  SeqRange rank_sequences(int64_t mb) const {
    return dp_sequences(sc.model.batch, sc.model.microbatches, mb, dp_size, dp_index);
  }
  // Micro-batch mb of step t on this rank: its sequences (may be none: the rank still joins
  // every collective) and their tokens, cut to its context-parallel chunk of each.
  PMicro<T> micro(int64_t t, int64_t mb) {
    const int64_t S = sc.model.seq;
    const SeqRange seqs = rank_sequences(mb);
    PMicro<T> u;
    u.g0 = seqs.begin, u.b = seqs.size();
    std::vector<int64_t> in(static_cast<size_t>(u.b * S), 0), tg(in.size(), 0);
    data.batch(t, u.g0, u.b, S, in.data(), tg.data());
    u.share = MicroShare{micro_batch_sequences(sc.model.batch, sc.model.microbatches, mb).size(), dp_size};
    u.inputs = cp_slice_tokens(model->cp(), in, u.b, S), u.targets = cp_slice_tokens(model->cp(), tg, u.b, S);
    return u;
  }
  void report_tokens(RankStepRecord<T>& out, const PMicroResult& r, int64_t g0);
  void reduce_grads(std::vector<Tensor<T>>& out);
  // Under a policy that reduces gradients in 16 bits: reduce_grads run again, nothing rounded, on
  // the absolute values of this rank's gradients (absolute: per reduced element, the sum of the
  // |partials| it is made of, RankStepRecord::grad_magnitude) or on the values themselves (the
  // reductions' exact result, RankStepRecord::grads_exact). The gradients are left as they were.
  std::vector<Tensor<T>> reduction_unrounded(bool absolute);
  bool unrounded_pass = false;  // reduce_grads rounds nothing (reduction_unrounded)
  void round_entry(Low low, T* x, int64_t n) const {
    if (!unrounded_pass) round_to(low, x, n);
  }
  // reduce_grads' steps, in order (each entry's reductions, param_plan.h)
  Partners partners_before_dp();
  void reduce_dp(mesh::GroupKind unit, std::vector<Tensor<T>>& out);
  void reduce_tp(std::vector<Tensor<T>>& out);
  void sync_pairs(std::vector<Tensor<T>>& out, Partners& partners);
  void step_optimizer(std::vector<Tensor<T>>& grads);
  // fp16: the reduced gradients unscaled, the world's found-inf flag (out.skipped); own_inf: whether
  // this rank's gradients held an inf before any reduction (the bug zoo's fp16_found_inf_local)
  void unscale(RankStepRecord<T>& out, bool own_inf);
  // The step's grad norm (and its parts per family) and the world's tokens per expert, in one
  // allreduce; counts: this rank's on entry, the world's on return.
  void norm_and_counts(RankStepRecord<T>& out, std::vector<int64_t>& counts);
  // Clips, steps the optimizer, updates the expert bias from the world's counts; records the
  // parameters, the counts and the biases after the step.
  void apply_update(RankStepRecord<T>& out, const std::vector<int64_t>& counts);
};

// zero1 / zero2: each parameter's optimizer shard, its FSDP piece (the plan's optimizer
// placement) over the optimizer storage's shard and replicate groups, drawn from Philox like the
// replicated copy.
template <class T> void ParallelRun<T>::Impl::build_zero(uint64_t seed) {
  zero.resize(specs.size());
  for (size_t p = 0; p < specs.size(); ++p) {
    if (!plan[p].zero()) continue;
    if (!model->held(p)) continue;  // another pipeline stage's parameter
    const Storage& st = plan[p].optimizer_storage;
    const DataParallelGroups g{&mesh::comm_group(world, mesh, st.fsdp), &mesh::comm_group(world, mesh, st.replicate)};
    zero[p].emplace(specs[p], mesh, plan[p].optimizer, world.rank(), seed, model->params[p].mp(), g);
  }
}

template <class T> void ParallelRun<T>::Impl::report_tokens(RankStepRecord<T>& out, const PMicroResult& r, int64_t g0) {
  const int64_t S = sc.model.seq, K = sc.model.top_k;
  const bool split = tp.sp && tp.size > 1;
  const CpContext& cp = model->cp();  // the global position of each row of this rank's chunk: cp.position
  const int64_t Sc = cp.chunk(S), Sl = split ? Sc / tp.size : Sc, lane0 = split ? tp.rank * Sl : 0;
  for (size_t l = 0; l < r.chosen.size(); ++l) {
    const auto n = static_cast<int64_t>(r.chosen[l].size()) / K;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = r.first_row[l] + i;  // row of the residual view
      out.token_ids[l].push_back((g0 + t / Sl) * S + cp.position(S, lane0 + t % Sl));
    }
    out.chosen[l].insert(out.chosen[l].end(), r.chosen[l].begin(), r.chosen[l].end());
  }
}

// The plan's reductions (parallel/reduction_plan.h): the data-parallel reduction of the dense
// and the expert parameters (one flat reduce-scatter + allreduce each, over their home groups),
// then the TP sums of the partitioned families (one allreduce), then the pipeline's pair sync.
// The TP sum comes last, as Megatron-LM's finalize_model_grads does: each lane's DP group is
// another communicator, whose order of summation may differ (NCCL's ring sums an element by its
// offset in the flat buffer, and uneven TP shards before it move it); one all-reduce inside
// the TP group then gives every lane sharing the gradient the same bits. Summed before the DP
// reduction, the replicas of a shared KV head came out 1 ulp apart on nccl (and under
// PARITY_SIM_ORDER=ring, which reproduces it on the CPU).
//
// A reduction in bf16 (the entry's dtype, core/precision.h) is every input rounded to bf16,
// an fp32 sum, the result rounded to bf16 (what a bf16 collective delivers, to within its
// internal order); fp32 (the default under bf16) and the compute dtypes round nothing.
template <class T> void ParallelRun<T>::Impl::reduce_grads(std::vector<Tensor<T>>& out) {
  out.assign(specs.size(), {});
  for (size_t p = 0; p < specs.size(); ++p) {
    round_entry(entry(p).dp_dtype, model->mp_grads[p].ptr(), model->mp_grads[p].numel());
    if (!model->held(p)) out[p] = Tensor<T>(Shape(specs[p].shape.size(), 0));  // another stage's
  }
  Partners partners = partners_before_dp();
  for (mesh::GroupKind unit : {mesh::GroupKind::dense_dp, mesh::GroupKind::edp}) reduce_dp(unit, out);  // home groups
  reduce_tp(out);
  sync_pairs(out, partners);
}

template <class T> std::vector<Tensor<T>> ParallelRun<T>::Impl::reduction_unrounded(bool absolute) {
  std::vector<Tensor<T>> kept = model->mp_grads;
  for (auto& g : model->mp_grads)
    for (T& x : g.data)
      if (absolute) x = std::abs(x);
  unrounded_pass = true;
  std::vector<Tensor<T>> mag;
  reduce_grads(mag);
  unrounded_pass = false;
  model->mp_grads = std::move(kept);
  return mag;
}

// 2. TP: every TP-summed gradient, DP-reduced (this rank's shard of it under FSDP / ZeRO-2: the
// lanes of a TP group hold the same shard), in one flat all-reduce, rounded to its dtype before
// and after.
template <class T> void ParallelRun<T>::Impl::reduce_tp(std::vector<Tensor<T>>& out) {
  std::vector<size_t> tp_sum;
  Buffer<T> flat;
  for (size_t p = 0; p < specs.size(); ++p)
    if (entry(p).tp_sum && model->held(p)) {
      tp_sum.push_back(p);
      flat.insert(flat.end(), out[p].data.begin(), out[p].data.end());
    }
  const auto round_flat = [&] {
    int64_t at = 0;
    for (size_t p : tp_sum) {
      round_entry(entry(p).tp_dtype, flat.data() + at, out[p].numel());
      at += out[p].numel();
    }
  };
  round_flat();
  tp_allreduce(tp, flat);
  round_flat();
  size_t at = 0;
  for (size_t p : tp_sum) {
    Tensor<T>& g = out[p];
    std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), g.numel(), g.data.begin());
    at += static_cast<size_t>(g.numel());
    if (entry(p).tp_scale != 1.0) scale_values(g.ptr(), static_cast<T>(entry(p).tp_scale), g.numel());
    if (entry(p).tp_sum_again) tp_allreduce(tp, g.data);
  }
}

// The pair sync of a tied entry (param_plan.h PairSync): the first stage's embedding gradient
// and the last stage's head gradient, each reduced over its stage's data parallel first, then
// summed over the embedding group (the pair of stages), as Megatron's finalize_model_grads
// does. A sum of two is the same bits on both stages, so the two replicas stay identical
// whatever order each stage's DP reduction took (NCCL's differ between communicators; summing
// before the DP reduction left the replicas 1 ulp apart on nccl). Bug zoo (the plan's
// mutations): the all-reduce left out, run twice, or adding what the partner still holds
// unreduced (Megatron-LM#844: partial results added).
template <class T> typename ParallelRun<T>::Impl::Partners ParallelRun<T>::Impl::partners_before_dp() {
  Partners partners;
  for (size_t p = 0; p < specs.size(); ++p)
    if (plan[p].pair_synced && plan[p].pair.adds_unreduced && model->held(p)) {
      Tensor<T> partner = model->mp_grads[p];
      pair(plan[p].pair.first, plan[p].pair.last).allreduce(std::span<T>(partner.data), comm::ReduceOp::sum);
      const Tensor<T>& mine = model->mp_grads[p];
      for (size_t i = 0; i < partner.data.size(); ++i) partner.data[i] -= mine.data[i];
      partners.emplace_back(p, std::move(partner));
    }
  return partners;
}

// 1. DP: the entries living over `unit` (a home group) in flat reduce-scatter + all-reduces, two:
// the entries no model-parallel split cuts (LayerNorm, the router, a KV head shared by the TP
// lanes: each lane holds a replica), then the split ones. Each lane's DP group is another
// communicator, and NCCL's ring sums an element in an order set by its offset and the buffer's
// length; in one buffer, a replica sat behind the lane's (uneven) split shards, at another offset
// per lane, and the replicas could come out 1 ulp apart (PARITY_SIM_ORDER=ring found it on a drawn
// layout: LayerNorm under tp 2 x dp 4). Alone, the replicas fill a buffer of the same length at
// the same offsets in every lane. Under gloo's order (and sim's default) the bits do not move.
template <class T> void ParallelRun<T>::Impl::reduce_dp(mesh::GroupKind unit, std::vector<Tensor<T>>& out) {
  for (const bool whole : {true, false}) {
    std::vector<const ShardedParam<T>*> ps;
    std::vector<const Tensor<T>*> gs;
    std::vector<size_t> which;
    for (size_t p = 0; p < specs.size(); ++p)
      if (plan[p].home == unit && plan[p].mp.empty() == whole &&
          model->held(p)) {  // zero2: reduce-scattered onto the optimizer shard
        ps.push_back(zero2(p) ? &*zero[p] : &model->params[p]), gs.push_back(&model->mp_grads[p]), which.push_back(p);
      }
    if (which.empty()) continue;
    std::vector<Tensor<T>> red = reduce_all(ps, gs);
    for (size_t i = 0; i < which.size(); ++i) {
      const FamilyReduction& e = entry(which[i]);
      Tensor<T>& g = red[i];
      round_entry(e.dp_dtype, g.ptr(), g.numel());
      // Experts planned over dense_dp (a bug: dp_parts cannot lay their shards there): the
      // EDP result summed over the EP peers too, whose other experts get added in.
      if (e.dp_group != unit) {
        if (unit != mesh::GroupKind::edp || e.dp_group != mesh::GroupKind::dense_dp)
          throw Error("reduction plan: " + specs[which[i]].name + " cannot be reduced over " +
                      std::string(mesh::group_kind_name(e.dp_group)));
        ep_group->allreduce(std::span<T>(g.data), comm::ReduceOp::sum);
      }
      if (e.dp_scale != 1.0) scale_values(g.ptr(), static_cast<T>(e.dp_scale), g.numel());
      out[which[i]] = std::move(g);
    }
  }
}

// 3. The pair sync after the DP reduction (or, mutated, the partner's unreduced gradient added).
template <class T> void ParallelRun<T>::Impl::sync_pairs(std::vector<Tensor<T>>& out, Partners& partners) {
  for (size_t p = 0; p < specs.size(); ++p) {
    const ParamEntry& e = plan[p];
    if (!e.pair_synced || e.pair.adds_unreduced || e.pair.times == 0 || !model->held(p)) continue;
    Tensor<T>& g = out[p];  // the reduced gradient, or this rank's shard of it: the same piece on both
    for (int k = 0; k < e.pair.times; ++k)
      pair(e.pair.first, e.pair.last).allreduce(std::span<T>(g.data), comm::ReduceOp::sum);
    round_entry(entry(p).dp_dtype, g.ptr(), g.numel());
  }
  for (auto& [p, partner] : partners) {  // this rank's reduced piece plus the partner's unreduced values there
    const Tensor<T> add = zero2(p)                             ? zero[p]->piece(partner)  // the gradient is a shard
                          : plan[p].sharding == DpSharding::fsdp ? model->params[p].piece(partner)
                                                                 : partner;  // ddp, zero1: whole
    for (size_t i = 0; i < add.data.size() && i < out[p].data.size(); ++i) out[p].data[i] += add.data[i];
  }
}

// fp16 (optim/loss_scaler.h): this rank's reduced gradients (whole or its shards) times 1 / scale,
// and the found-inf flag taken as the max of every rank's over the whole world: an inf that only
// one rank's shard, expert or stage holds skips the step everywhere, as it does on one device.
// A skipped step's gradients are recorded as zeros, as the baseline records them.
template <class T> void ParallelRun<T>::Impl::unscale(RankStepRecord<T>& out, bool own_inf) {
  out.loss_scale = scaler.scale;
  std::vector<double> flag{unscale_grads(out.grads, scaler.scale) ? 1.0 : 0.0};
  // bug zoo (core/inject.h): the flag of this rank's own gradients, never all-reduced
  static const bool local_only = injected("fp16_found_inf_local");
  if (local_only) flag[0] = own_inf ? 1.0 : 0.0;
  else world.allreduce(std::span<double>(flag), comm::ReduceOp::max);
  out.skipped = flag[0] > 0;
  if (out.skipped)
    for (auto& g : out.grads) zero_values(g.ptr(), g.numel());
}

template <class T> void ParallelRun<T>::Impl::step_optimizer(std::vector<Tensor<T>>& grads) {
  ParamSet<T> w, g;
  w.specs = g.specs = local_specs_;
  for (size_t p = 0; p < specs.size(); ++p) {  // zero1 / zero2: the optimizer shard, its gradient piece
    // (the shard is cut from the replicated parameter each step, so a loaded checkpoint needs nothing more)
    w.tensors.push_back(zero[p] ? zero[p]->piece(model->params[p].local) : std::move(model->params[p].local));
    g.tensors.push_back(zero[p] && !zero2(p) ? zero[p]->piece(grads[p]) : std::move(grads[p]));
  }
  opt->step(w, g);
  // bug zoo (core/inject.h): the update applied to bf16 parameters with no fp32 master
  // (accelerate#3979), and the optimizer's state kept in bf16
  if (injected("no_fp32_master"))
    for (auto& x : w.tensors) round_to(Low::bf16, x.ptr(), x.numel());
  if (injected("optim_state_in_bf16"))
    for (auto* st : {&opt->first_moment(), &opt->second_moment()})
      for (auto& x : st->tensors) round_to(Low::bf16, x.ptr(), x.numel());
  // bug zoo: a replica's optimizer state one ulp apart (its parameters still equal this step)
  static const bool drift = injected("optim_state_replica_drift");
  if (drift && mesh.coord(mesh::MeshDim::dp_replicate, world.rank()) > 0 && opt->has_second_moment())
    for (auto& x : opt->second_moment().tensors)
      if (x.numel() > 0) {
        x.ptr()[0] = std::nextafter(x.ptr()[0], T(1));
        break;
      }
  for (size_t p = 0; p < specs.size(); ++p) {
    if (!zero[p]) model->params[p].local = std::move(w.tensors[p]);
    if (!zero[p] || zero2(p)) grads[p] = std::move(g.tensors[p]);
    if (!zero[p]) continue;
    zero[p]->local = std::move(w.tensors[p]);
    model->params[p].local = zero[p]->gather();  // the updated shards all-gathered over the shard group
  }
}

// Every entry of the global order this rank's stage takes part in (parallel/pipeline.h): its
// forwards and backwards, and the transfers it sends or receives (a broadcast from the sender
// over the pair). A received stream is the sender's size: both ranks hold the same sequences.
template <class T> void ParallelRun<T>::Impl::run_pipeline(std::vector<PMicro<T>>& us) {
  const int64_t pp = mesh.stages(), me = mesh.stage(world.rank());
  const int64_t n_res = model->stream_rows(), D = sc.model.dim;
  for (const PipeOp& op : order) {
    PMicro<T>& u = us[static_cast<size_t>(op.mb)];
    if (op.kind == PipeOp::Kind::forward || op.kind == PipeOp::Kind::backward) {
      if (op_stage(op, pp) != me) continue;
      // bug zoo (core/inject.h): the last stage's accumulators reset at each micro-batch's forward
      static const bool wipe = injected("pp_grads_wiped_per_microbatch");
      if (wipe && me == pp - 1 && op.kind == PipeOp::Kind::forward && op.mb > 0 && op.v + 1 == model->virtual_stages())
        for (auto& g : model->mp_grads) zero_values(g.ptr(), g.numel());
      if (op.kind == PipeOp::Kind::forward) model->forward_chunk(u, op.v);
      else model->backward_chunk(u, op.v);
      continue;
    }
    const int64_t from = op_stage(op, pp), to = transfer_peer(op, pp);
    if (me != from && me != to) continue;
    comm::Communicator& two = pair(from, to);
    if (me == to) u.h.assign(static_cast<size_t>(u.b * n_res * D), T(0));
    const int root = two.members()[0] == pp_group_members()[static_cast<size_t>(from)] ? 0 : 1;
    two.broadcast(std::span<T>(u.h.data(), u.h.size()), root);
  }
}

template <class T>
ParallelRun<T>::ParallelRun(const Scenario& s, comm::Communicator& world, const ValidLayout* valid)
    : impl_(std::make_unique<Impl>(s, world, valid)) {}
template <class T> ParallelRun<T>::~ParallelRun() = default;

template <class T> RankStepRecord<T> ParallelRun<T>::step(int64_t t, const RouteOracle* oracle) {
  Impl& I = *impl_;
  const ModelConfig& c = I.sc.model;
  const PrecisionScope policy(c.precision());  // the storage points of the model read it
  const LossScaleScope scaled(I.scaler.scale);   // fp16: the backward's seeds read it
  RankStepRecord<T> out;
  out.step = t;
  out.token_ids.resize(static_cast<size_t>(c.moe_layers()));
  out.chosen.resize(static_cast<size_t>(c.moe_layers()));
  out.followed.assign(static_cast<size_t>(c.moe_layers()), 0);
  I.model->route_oracle = oracle;
  std::vector<int64_t> counts(static_cast<size_t>(c.moe_layers() * c.experts), 0);
  I.model->zero_grads();
  std::vector<double> parts;  // (ce, aux) per micro-batch, summed over DP in one allreduce after the last
  std::vector<std::pair<size_t, Tensor<T>>> early;  // bug zoo: zero2_reduce_incomplete
  // What a micro-batch's forwards recorded: the loss parts, the counts, the tokens routed
  const auto record = [&](const PMicroResult& r, int64_t g0) {
    out.activation_bytes = std::max(out.activation_bytes, r.saved_bytes);
    for (size_t l = 0; l < r.followed.size() && l < out.followed.size(); ++l) out.followed[l] += r.followed[l];
    parts.insert(parts.end(), {r.ce, r.aux});
    for (size_t l = 0; l < r.counts.size(); ++l)
      for (size_t e = 0; e < r.counts[l].size(); ++e) counts[l * static_cast<size_t>(c.experts) + e] += r.counts[l][e];
    I.report_tokens(out, r, g0);
  };
  if (I.mesh.stages() > 1) {
    std::vector<PMicro<T>> us;
    for (int64_t mb = 0; mb < c.microbatches; ++mb) us.push_back(I.micro(t, mb));
    I.run_pipeline(us);
    for (const PMicro<T>& u : us) record(u.res, u.g0);
  }
  for (int64_t mb = 0; mb < c.microbatches && I.mesh.stages() == 1; ++mb) {
    PMicro<T> u = I.micro(t, mb);
    // bug zoo (the plan's reduced_before_last_micro): zero2's reduce-scatter taken before the last
    // micro-batch's gradient is accumulated (DeepSpeed's ds_grad_is_ready class)
    if (mb + 1 == c.microbatches)
      for (size_t p = 0; p < I.specs.size(); ++p)
        if (I.zero2(p) && I.plan[p].reduced_before_last_micro) early.emplace_back(p, I.model->mp_grads[p]);
    PMicroResult r = I.model->forward_backward(u);
    if (injected("grad_accum_in_bf16"))  // bug zoo (core/inject.h): micro-batch accumulation in bf16
      for (auto& g : I.model->mp_grads) round_to(Low::bf16, g.ptr(), g.numel());
    // bug zoo: fp16's gradients unscaled as each micro-batch is accumulated, and the sum once more
    static const bool unscale_each = injected("fp16_unscale_per_microbatch");
    if (unscale_each && mb + 1 < c.microbatches) (void)unscale_grads(I.model->mp_grads, I.scaler.scale);
    record(r, u.g0);
  }
  I.model->fp8_step_done();  // fp8-delayed: the amax histories pushed once per step (a no-op otherwise)
  I.dense_dp->allreduce(std::span<double>(parts), comm::ReduceOp::sum);
  if (I.pp_group) I.pp_group->allreduce(std::span<double>(parts), comm::ReduceOp::sum);  // ce: last stage; aux: each
  for (size_t mb = 0; mb < parts.size(); mb += 2) {
    out.micro_losses.push_back(parts[mb] + parts[mb + 1]);
    out.ce += parts[mb], out.aux += parts[mb + 1], out.loss += parts[mb] + parts[mb + 1];
  }
  for (auto& [p, g] : early) I.model->mp_grads[p] = std::move(g);
  if (c.reduce != Low::none) out.grad_magnitude = I.reduction_unrounded(true);
  if (c.reduce != Low::none) out.grads_exact = I.reduction_unrounded(false);
  bool own_inf = false;  // the bug zoo's fp16_found_inf_local: this rank's gradients before any reduction
  for (size_t p = 0; p < I.model->mp_grads.size() && injected("fp16_found_inf_local"); ++p)
    own_inf = own_inf || any_non_finite(I.model->mp_grads[p].ptr(), I.model->mp_grads[p].numel());
  I.reduce_grads(out.grads);
  // bug zoo: fp16's grad norm (and the clipping) taken from the gradients still scaled
  static const bool clip_scaled = injected("fp16_clip_before_unscale");
  if (clip_scaled) I.norm_and_counts(out, counts);
  if (scales_loss(c.precision())) I.unscale(out, own_inf);
  if (!clip_scaled) I.norm_and_counts(out, counts);
  I.apply_update(out, counts);
  if (scales_loss(c.precision())) I.scaler.update(out.skipped);
  I.model->route_oracle = nullptr;  // it points into the caller's step record
  return out;
}

// [squared norm per family | tokens per expert] in one world allreduce: the counts travel
// as doubles, exact below 2^53. The parts per family let the verdict say which family a
// wrong norm comes from.
template <class T>
void ParallelRun<T>::Impl::norm_and_counts(RankStepRecord<T>& out, std::vector<int64_t>& counts) {
  std::vector<double> sqv(kFamilyCount, 0.0);
  for (size_t p = 0; p < specs.size(); ++p)
    if (counts_in_norm(p))
      sqv[static_cast<size_t>(specs[p].family)] += sum_of_squares(out.grads[p].ptr(), out.grads[p].numel());
  const std::vector<int64_t> local_counts = counts;
  double local_sq = 0;  // this rank's part (the plan's norm_summed false: a bug)
  for (size_t f = 0; f < kFamilyCount; ++f) local_sq += sqv[f];
  // the exact reductions' parts, counted as the norm counts (the verdict names a family's factor with them)
  const bool exact = !out.grads_exact.empty();
  std::vector<double> ex(exact ? kFamilyCount : 0, 0.0);
  for (size_t p = 0; exact && p < specs.size(); ++p)
    if (counts_in_norm(p))
      ex[static_cast<size_t>(specs[p].family)] += sum_of_squares(out.grads_exact[p].ptr(), out.grads_exact[p].numel());
  for (int64_t n : counts) sqv.push_back(static_cast<double>(n));
  sqv.insert(sqv.end(), ex.begin(), ex.end());
  world.allreduce(std::span<double>(sqv), comm::ReduceOp::sum);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int64_t>(sqv[i + kFamilyCount]);
  out.norm_sq_by_family_exact.assign(sqv.end() - static_cast<std::ptrdiff_t>(ex.size()), sqv.end());
  if (injected("tokens_per_expert_local")) counts = local_counts;  // bug zoo (core/inject.h)
  out.norm_sq_by_family.assign(sqv.begin(), sqv.begin() + static_cast<std::ptrdiff_t>(kFamilyCount));
  double sq = 0;
  for (double part : out.norm_sq_by_family) sq += part;
  out.grad_norm = std::sqrt(plan.families.norm_summed ? sq : local_sq);
  out.clip_coef = clip_coefficient(out.grad_norm, sc.optim.clip);
}

template <class T>
void ParallelRun<T>::Impl::apply_update(RankStepRecord<T>& out, const std::vector<int64_t>& counts) {
  const ModelConfig& c = sc.model;
  std::vector<Tensor<T>> step_grads = out.grads;
  const T coef = static_cast<T>(out.clip_coef);
  if (out.clip_coef != 1.0)
    for (size_t p = 0; p < step_grads.size(); ++p)
      if (entry(p).clip)
        for (auto& x : step_grads[p].data) x *= coef;
  if (!out.skipped) step_optimizer(step_grads);  // fp16: a step with an inf anywhere is skipped
  for (const auto& p : model->params) out.params.push_back(p.local);
  for (int64_t l = 0; l < c.moe_layers(); ++l) {
    out.tokens_per_expert.emplace_back(counts.begin() + l * c.experts, counts.begin() + (l + 1) * c.experts);
    if (c.bias_rate > 0)  // bug zoo (core/inject.h): the update's sign flipped
      expert_bias_update(model->expert_bias[static_cast<size_t>(l)].data(), out.tokens_per_expert.back().data(),
                         c.experts, injected("bias_update_sign") ? -c.bias_rate : c.bias_rate);
  }
  out.expert_bias = model->expert_bias;
}

template <class T> const mesh::Mesh& ParallelRun<T>::mesh() const { return impl_->mesh; }
template <class T> const std::vector<ParamSpec>& ParallelRun<T>::specs() const { return impl_->specs; }
template <class T> const std::vector<mesh::TensorLayout>& ParallelRun<T>::layouts() const { return impl_->layouts; }
template <class T> const std::vector<mesh::TensorLayout>& ParallelRun<T>::grad_layouts() const {
  return impl_->grad_layouts;
}

template <class T> const ParallelModel<T>& ParallelRun<T>::model() const { return *impl_->model; }

template <class T> TrainingRefs<T> ParallelRun<T>::training_refs() {
  Impl& I = *impl_;
  TrainingRefs<T> refs{&I.sc.model, &I.specs, &I.layouts, {}, I.opt.get(), &I.model->expert_bias, &I.opt_layouts};
  if (scales_loss(I.sc.model.precision())) refs.scaler = &I.scaler;
  if (I.model->fp8.on()) refs.fp8 = &I.model->fp8;
  for (auto& p : I.model->params) refs.params.push_back(&p.local);
  return refs;
}

template class ParallelRun<float>;
template class ParallelRun<double>;

}  // namespace parity
