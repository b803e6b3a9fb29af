#include "parallel/pmodel.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <type_traits>

#include "core/error.h"
#include "core/inject.h"
#include "core/fp8.h"
#include "core/fp8_delayed.h"
#include "core/precision.h"
#include "ops/elementwise.h"

#include "ops/attention.h"
#include "ops/norm.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "mesh/param_layout.h"
#include "model/trace.h"
#include "parallel/pmodel_impl.h"
#include "parallel/pmoe.h"
#include "parallel/recompute.h"

namespace parity {

namespace {

// The factor of this rank's summed cross-entropy: 1 / (B·S), the global token count
// (MODEL.md), whatever share of the batch the rank holds, none included, so that every
// data-parallel reduction is a plain sum. The bug zoo (core/inject.h) replaces it:
// micro_loss_scaling by the micro-batch's token count; loss_mean_of_rank_means by this
// rank's own token count, the ranks' means then averaged over dp and the micro-batches (a
// rank with no token adds 0): right only when every rank holds B / (M·dp) sequences.
double loss_scale(const ModelConfig& c, int64_t b, const MicroShare& share) {
  static const bool micro_bug = injected("micro_loss_scaling"), rank_bug = injected("loss_mean_of_rank_means");
  if (micro_bug) return 1.0 / static_cast<double>(share.micro_seqs * c.seq);
  if (rank_bug) return b == 0 ? 0.0 : 1.0 / static_cast<double>(share.dp * c.microbatches * b * c.seq);
  return 1.0 / static_cast<double>(c.batch * c.seq);
}


}  // namespace

template <class T>
ParallelModel<T>::ParallelModel(const Scenario& s, const mesh::Mesh& m, comm::Communicator& world,
                                const ParamPlan& plan)
    : fp8(fp8_delayed_state(s.model)), cfg_(s.model), recompute_(s.layout.recompute), world_(&world),
      fp8_world_(&world) {
  using mesh::GroupKind;
  using mesh::MeshDim;
  const int r = world.rank();
  if (m.stages() > 1) {  // the recomputed routing's check runs inside a stage: its ranks
    std::vector<int> stage;
    for (int q = 0; q < m.world(); ++q)
      if (m.stage(q) == m.stage(r)) stage.push_back(q);
    world_ = &world.group(stage);
  }
  tp_ = {&mesh::comm_group(world, m, GroupKind::tp), m.coord(MeshDim::tp, r), m.size(MeshDim::tp), s.layout.sp};
  cp_ = {&mesh::comm_group(world, m, GroupKind::cp), m.coord(MeshDim::cp, r), m.size(MeshDim::cp),
         s.layout.cp_order == CpOrder::balanced};
  const int64_t ep_r = m.coord(MeshDim::ep, r), ep_n = m.size(MeshDim::ep);
  ep_ = {&mesh::comm_group(world, m, GroupKind::ep), &mesh::comm_group(world, m, GroupKind::etp), s.model.experts,
         s.model.experts / ep_n, ep_r * (s.model.experts / ep_n)};
  tp_amax_ = fp8_amax_over(tp_.tp), etp_amax_ = fp8_amax_over(ep_.etp);
  split_ = pp_stage_layers(s.layout, s.model.layers);
  if (s.layout.pp == 1) split_ = {{0, s.model.layers}};
  else  // this rank's stage runs virtual stages stage, stage + pp, ...; the others stay empty
    for (size_t v = 0; v < split_.size(); ++v)
      if (static_cast<int64_t>(v) % s.layout.pp != m.stage(r)) split_[v] = {0, 0};
  // Each parameter as its plan entry says: stored over its home data-parallel group (FSDP over
  // the first part, replicas over the second, or whole over the group), its model-parallel
  // chunks read off its placements, held on its stages. Every rank makes the groups in registry
  // order: the dense ones at embed.weight, the experts' at the first routed expert.
  for (size_t p = 0; p < plan.size(); ++p) {
    const ParamEntry& e = plan[p];
    const Storage& st = e.param_storage;
    const DataParallelGroups g{st.sharded ? &mesh::comm_group(world, m, st.fsdp) : nullptr,
                               &mesh::comm_group(world, m, st.replicate)};
    params.emplace_back(e.spec, m, e.param, r, s.seed, mp_chunks(e, m, r), g);
    held_.push_back(mesh::holds(m, e.param, r) ? 1 : 0);
    // another stage's parameter: no gradient here (an empty accumulator)
    mp_grads.emplace_back(held_.back() ? params.back().mp_shape() : Shape(e.spec.shape.size(), 0));
    compute_copy_.push_back(e.compute_copy);
    // every linear weight is split over tp > 1 (the routed experts over etp > 1) on every lane alike: a
    // lane holding the whole of an unevenly split one (F = 1 over tp 3) still joins the amax reduction
    // (the KV heads a lane replicates are refused under fp8, mesh/layout_config.cpp)
    const AmaxReduce* amax = !e.fp8_amax_over                      ? nullptr
                             : *e.fp8_amax_over == GroupKind::etp ? &etp_amax_
                                                                  : &tp_amax_;
    fp8_weight_.push_back({e.fp8_blocks > 0, amax && *amax ? amax : nullptr});  // empty: the zoo's fp8_amax_per_lane
  }
  gathered_.resize(plan.size()), is_gathered_.assign(plan.size(), 0);
  // the weights by index: names looked up here, once
  const bool ln_bias = s.model.norm == NormKind::layernorm;  // RMSNorm has no bias
  emb_ = plan.index("embed.weight"), final_w_ = plan.index("final_ln.weight");
  outer_ = {emb_, final_w_};
  if (ln_bias) final_b_ = plan.index("final_ln.bias"), outer_.push_back(final_b_);
  if (plan.has("lm_head.weight")) head_ = plan.index("lm_head.weight"), outer_.push_back(head_);
  for (int64_t l = 0; l < s.model.layers; ++l) {
    const std::string p = "layers." + std::to_string(l);
    const auto at = [&](const char* what) { return plan.index(p + what); };
    LayerParams L;
    L.ln1_w = at(".ln1.weight"), L.ln2_w = at(".ln2.weight");
    if (ln_bias) L.ln1_b = at(".ln1.bias"), L.ln2_b = at(".ln2.bias");
    L.wq = at(".attn.wq"), L.wk = at(".attn.wk"), L.wv = at(".attn.wv"), L.wo = at(".attn.wo");
    if (s.model.qk_norm) L.qn = at(".attn.q_norm.weight"), L.kn = at(".attn.k_norm.weight");
    const bool moe = s.model.is_moe(l);
    L.w1 = at(moe ? ".moe.experts.w1" : ".mlp.w1"), L.w3 = at(moe ? ".moe.experts.w3" : ".mlp.w3");
    L.w2 = at(moe ? ".moe.experts.w2" : ".mlp.w2");
    if (moe) L.gate = at(".moe.router.gate");
    if (moe && s.model.shared_experts > 0)
      L.sw1 = at(".moe.shared.w1"), L.sw3 = at(".moe.shared.w3"), L.sw2 = at(".moe.shared.w2");
    for (size_t q = 0; q < plan.size(); ++q)
      if (mesh::param_layer(plan[q].spec) == l) L.all.push_back(q);
    layer_.push_back(std::move(L));
  }
  expert_bias.assign(static_cast<size_t>(s.model.moe_layers()), Buffer<T>(static_cast<size_t>(s.model.experts), T(0)));
}

template <class T> void ParallelModel<T>::zero_grads() {
  for (auto& t : mp_grads) zero_values(t.ptr(), t.numel());
  // The gathered copies are the step's weight cache: an fp8 weight is quantized once per step, at its
  // first use (gather), and its E4M3 copy serves every micro-batch's forward and backward; dropping them
  // here is the refresh after the optimizer step. The zoo's fp8_weight_cache_not_refreshed keeps the fp8
  // weights' copies: from step 1 they are the E4M3 copies of the previous step's weights (TransformerEngine's
  // cached FP8 weight and transpose not refreshed after the update).
  static const bool stale = injected("fp8_weight_cache_not_refreshed");
  for (size_t q = 0; q < gathered_.size(); ++q)
    if (!(stale && fp8_weight_[q].on && is_gathered_[q])) gathered_[q] = Tensor<T>(), is_gathered_[q] = 0;
}

template <class T> PMicroResult ParallelModel<T>::forward_backward(PMicro<T>& u) {
  forward_chunk(u, 0);
  backward_chunk(u, 0);
  return std::move(u.res);
}

// A micro-batch's sizes on this rank (its context-parallel chunk of every sequence, the
// residual rows under sequence parallel), with the routing oracle pointed at its sequences.
template <class T> typename ParallelModel<T>::Impl ParallelModel<T>::impl_for(const PMicro<T>& u) {
  ModelConfig chunk = cfg_;
  chunk.seq = cp_.chunk(cfg_.seq);
  route_g0 = u.g0;
  if (trace::active()) {  // this rank's shards (model/trace.h); untraced, nothing
    trace::Placement place{tp_.rank, tp_.size, cp_.rank, cp_.size, tp_.sp, {}};
    for (const CpBlock& k : cp_.blocks(cfg_.seq)) place.blocks.push_back({k.row, k.rows, k.pos});
    trace::micro(u.g0, u.b, place);
  }
  return Impl{*this, cfg_, u.b, u.b * chunk.seq, u.b * stream_rows(), chunk};
}

template <class T> void ParallelModel<T>::forward_chunk(PMicro<T>& u, int64_t v) {
  const ModelConfig& c = cfg_;
  Impl I = impl_for(u);
  const Fp8SplitScope split(tp_amax_ ? &tp_amax_ : nullptr);  // fp8: a row split over TP (ETP: ep_dispatch)
  const Fp8StateScope delayed(&fp8);                           // fp8-delayed: the step's scales, its amaxes
  // bug zoo (core/inject.h): the amax history pushed (this rank's amaxes) at each micro-batch's forward
  static const bool push_per_micro = injected("fp8_history_per_microbatch");
  if (push_per_micro && v == 0 && fp8.recorded()) fp8.end_step(nullptr);
  const int64_t D = c.dim, n = I.n, n_res = I.n_res;
  PMicroResult& res = u.res;
  const auto moe = static_cast<size_t>(c.moe_layers());
  if (res.chosen.size() != moe)
    res.chosen.resize(moe), res.first_row.resize(moe), res.counts.resize(moe), res.followed.resize(moe);
  if (u.caches.empty()) u.caches.resize(static_cast<size_t>(c.layers));
  std::vector<size_t> outer;  // the embedding, final LayerNorm and head this stage holds
  for (size_t q : outer_)
    if (held(q)) outer.push_back(q);
  I.gather(outer);
  const bool first = v == 0, last = v + 1 == virtual_stages();
  const ShardedParam<T>& ep = params[emb_];
  const int64_t v0 = ep.mp_offset(0), Vl = ep.mp_shape()[0];
  Buffer<T>& h = u.h;  // (n_res, D) residual stream
  if (first) {
    const Tensor<T>& emb = I.w(emb_);  // (Vl, D)
    auto e_part = zeros<T>(n * D);
    vp_embedding_forward(u.inputs.data(), n, emb.ptr(), v0, Vl, D, e_part.data());
    h = I.to_res(std::move(e_part), D);
    I.rec(trace::Site::embed, -1, trace::Dir::fwd, h, D);
  }
  for (int64_t l = split_[static_cast<size_t>(v)].first; l < split_[static_cast<size_t>(v)].second; ++l) {
    const LayerParams& P = layer_[static_cast<size_t>(l)];
    auto& L = u.caches[static_cast<size_t>(l)];
    I.gather(P.all);  // at the first micro-batch of the step; held after
    I.attention_forward_block(P, h, L);
    I.ffn_forward_block(l, P, h, L);
    if (c.is_moe(l)) I.record_routing(res, l, L);
    drop_for_recompute(L, recompute_);  // what the backward recomputes (recompute none: keeps everything)
  }
  res.saved_bytes = 0;
  for (const auto& L : u.caches) res.saved_bytes += held_bytes(L);
  if (!last) return;
  // head: logits (n, Vl) = LN(h) · W, W (D, Vl) = lm_head's columns or embed's rows^T
  auto hf = zeros<T>(n_res * D), mf = zeros<T>(n_res), rf = zeros<T>(n_res);
  norm_forward(c.norm, h.data(), I.w(final_w_).ptr(), I.w_or_null(final_b_), n_res, D, hf.data(), mf.data(),
               rf.data());
  I.rec(trace::Site::final_ln, c.layers, trace::Dir::fwd, hf, D);
  Buffer<T> hf_full = I.full(hf, D);
  Buffer<T> head = c.tie_embeddings ? transpose(I.w(emb_).ptr(), Vl, D) : I.w(head_).data;
  auto logits = zeros<T>(n * Vl);
  matmul_forward(hf_full.data(), head.data(), logits.data(), n, D, Vl);
  storage_point(logits.data(), n * Vl);  // a storage point; cross-entropy runs in the compute dtype
  I.rec(trace::Site::logits, c.layers, trace::Dir::fwd, logits, Vl, trace::Rows::chunk, v0, c.vocab);
  VpCeCache<T> ce;
  // bug zoo (core/inject.h): under pipeline parallel the last stage normalises its loss per
  // micro-batch while the other stages' load-balancing terms keep the global count
  static const bool per_micro = injected("pp_loss_per_microbatch_last_stage");
  const double inv_tokens = per_micro && virtual_stages() > 1 ? 1.0 / static_cast<double>(u.share.micro_seqs * c.seq)
                                                             : loss_scale(c, u.b, u.share);
  res.ce = vp_cross_entropy_forward(tp_, logits.data(), u.targets.data(), n, v0, Vl, ce) * inv_tokens;

  auto dlogits = zeros<T>(n * Vl);
  // the loss's gradient scaled (fp16: optim/loss_scaler.h), stored in fp16 (a backward storage point)
  vp_cross_entropy_backward(logits.data(), u.targets.data(), n, v0, Vl,
                            static_cast<T>(inv_tokens * current_loss_scale()), ce, dlogits.data());
  grad_storage_point(dlogits.data(), n * Vl);
  if (injected("cross_entropy_in_bf16"))  // bug zoo (core/inject.h): softmax and its gradient in bf16
    round_to(Low::bf16, dlogits.data(), n * Vl);
  I.rec(trace::Site::logits, c.layers, trace::Dir::bwd, dlogits, Vl, trace::Rows::chunk, v0, c.vocab);
  auto dhf = zeros<T>(n * D);
  if (c.tie_embeddings) {
    auto dhead = zeros<T>(D * Vl);
    matmul_backward(hf_full.data(), head.data(), dlogits.data(), dhf.data(), dhead.data(), n, D, Vl);
    add_into(mp_grads[emb_].data, transpose(dhead.data(), D, Vl));
  } else {
    matmul_backward(hf_full.data(), head.data(), dlogits.data(), dhf.data(), I.g(head_), n, D, Vl);
  }
  Buffer<T> dhf_res = I.to_res(std::move(dhf), D);
  I.rec(trace::Site::final_ln, c.layers, trace::Dir::bwd, dhf_res, D);
  auto dh = zeros<T>(n_res * D);
  norm_backward(c.norm, h.data(), I.w(final_w_).ptr(), mf.data(), rf.data(), dhf_res.data(), n_res, D,
                dh.data(), I.g(final_w_), I.g_or_null(final_b_));
  h = std::move(dh);  // the backward starts from here
}

template <class T> void ParallelModel<T>::backward_chunk(PMicro<T>& u, int64_t v) {
  const ModelConfig& c = cfg_;
  Impl I = impl_for(u);
  const Fp8SplitScope split(tp_amax_ ? &tp_amax_ : nullptr);  // fp8: as the forward's
  const Fp8StateScope delayed(&fp8);
  const int64_t D = c.dim, n = I.n;
  Buffer<T>& dh = u.h;
  for (int64_t l = split_[static_cast<size_t>(v)].second - 1; l >= split_[static_cast<size_t>(v)].first; --l) {
    const LayerParams& P = layer_[static_cast<size_t>(l)];
    LayerCache<T>& L = u.caches[static_cast<size_t>(l)];
    if (recompute_ == Recompute::full) I.recompute_attention(l, P, L);  // the layer's forward again
    if (recomputes_ffn(recompute_)) I.recompute_ffn(l, P, L);
    I.ffn_backward_block(l, P, dh, L);
    if (recompute_ == Recompute::attention) I.recompute_attention(l, P, L);
    I.attention_backward_block(P, dh, L);
    L = LayerCache<T>{};  // this layer's activations are no longer needed
  }
  if (v != 0) return;
  const ShardedParam<T>& ep = params[emb_];
  I.rec(trace::Site::embed, -1, trace::Dir::bwd, dh, D);
  Buffer<T> dh_full = I.full(dh, D);
  vp_embedding_backward(u.inputs.data(), n, dh_full.data(), ep.mp_offset(0), ep.mp_shape()[0], D, I.g(emb_));
}

template <class T> void ParallelModel<T>::fp8_step_done() {
  if (!fp8.on()) return;
  // bug zoo (core/inject.h): each rank's history from its own pieces' amaxes, never reduced
  static const bool local = injected("fp8_delayed_amax_local");
  const AmaxReduce world = [this](std::span<float> a) { fp8_world_->allreduce(a, comm::ReduceOp::max); };
  fp8.end_step(local ? nullptr : &world);
}

template class ParallelModel<float>;
template class ParallelModel<double>;

}  // namespace parity
