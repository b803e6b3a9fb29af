#include "parallel/pmodel.h"

#include <span>
#include <type_traits>

#include "core/inject.h"
#include "core/precision.h"
#include "ops/elementwise.h"

#include "ops/attention.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/swiglu.h"
#include "mesh/param_layout.h"
#include "parallel/pmoe.h"
#include "parallel/recompute.h"
#include "parallel/reduction_plan.h"

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

template <class T> struct ParallelModel<T>::Impl {
  ParallelModel<T>& m;
  const ModelConfig& c;
  int64_t b, n, n_res;  // sequences, their tokens, this lane's residual tokens
  ModelConfig chunk;    // c with seq = this rank's context-parallel chunk (S / cp)

  // One allgather per FSDP group for the parameters of `names` not gathered yet in this
  // step (a flat FSDP unit: its dense parameters, and its routed experts), held in
  // m.gathered_ until the next zero_grads().
  void gather(const std::vector<std::string>& names) const {
    std::vector<const ShardedParam<T>*> dense, experts;
    for (const auto& nm : names) {
      if (m.gathered_.count(nm) != 0) continue;
      const ShardedParam<T>& sp = m.params[m.index(nm)];
      (sp.spec().family == Family::routed_experts ? experts : dense).push_back(&sp);
    }
    for (const auto* unit : {&dense, &experts}) {
      std::vector<Tensor<T>> got = gather_all(*unit);
      for (size_t i = 0; i < got.size(); ++i) {
        to_storage(got[i].ptr(), got[i].numel());  // the compute copy (core/precision.h); shards stay master
        m.gathered_[(*unit)[i]->spec().name] = std::move(got[i]);
      }
    }
  }
  void gather_layer(int64_t l) const {
    const std::string pre = "layers." + std::to_string(l) + ".";
    std::vector<std::string> names;
    for (const auto& sp : m.params)
      if (sp.spec().name.rfind(pre, 0) == 0) names.push_back(sp.spec().name);
    gather(names);
  }
  const Tensor<T>& w(const std::string& name) const { return m.gathered_.at(name); }
  T* g(const std::string& name) const { return m.mp_grads[m.index(name)].ptr(); }
  int64_t local_dim(const std::string& name, size_t d) const {
    return m.params[m.index(name)].mp_shape()[d];
  }
  Buffer<T> full(const Buffer<T>& res, int64_t W) const { return tp_to_full(m.tp_, res, b, chunk.seq, W); }
  Buffer<T> to_res(Buffer<T> part, int64_t W) const { return tp_sum_to_res(m.tp_, std::move(part), b, chunk.seq, W); }

  void attention_forward_block(const std::string& p, Buffer<T>& h, LayerCache<T>& L) const;
  void attention_backward_block(const std::string& p, Buffer<T>& dh, const LayerCache<T>& L) const;
  void ffn_forward_block(int64_t l, const std::string& p, Buffer<T>& h, LayerCache<T>& L) const;
  void ffn_backward_block(int64_t l, const std::string& p, Buffer<T>& dh, const LayerCache<T>& L) const;
  PMoeWeights<T> moe_weights(const std::string& p, int64_t l) const;
  // The first forward's routing of an MoE layer, into the micro-batch's result.
  void record_routing(PMicroResult& res, int64_t l, const LayerCache<T>& L) const {
    const auto i = static_cast<size_t>(l - c.dense_layers);  // the MoE layer
    res.aux += L.moe.aux;
    res.chosen[i] = to_vector(L.moe.chosen);
    res.first_row[i] = L.moe.t0;
    res.followed[i] = L.moe.followed;
    std::vector<int64_t> counts(static_cast<size_t>(c.experts), 0);
    for (int64_t e : L.moe.chosen) ++counts[static_cast<size_t>(e)];  // every token is routed by one rank
    res.counts[i] = counts;
  }
  // The backward's recompute of layer l's attention block (FFN block) from its saved input
  // (parallel/recompute.h); the FFN's checks that an MoE layer routed as in the first forward.
  void recompute_attention(int64_t l, const std::string& p, LayerCache<T>& L) const;
  void recompute_ffn(int64_t l, const std::string& p, LayerCache<T>& L) const;
};

namespace {
template <class T> void test_hook(int64_t l, Buffer<T>& saved) {
  if constexpr (std::is_same_v<T, double>)
    if (const auto& hook = recompute_test_hook()) hook(l, std::span<double>(saved.data(), saved.size()));
}
}  // namespace

template <class T>
void ParallelModel<T>::Impl::recompute_attention(int64_t l, const std::string& p, LayerCache<T>& L) const {
  Buffer<T> h = L.h_in;
  test_hook(l, h);
  attention_forward_block(p, h, L);  // L.h_in, L.h_mid: the values they held
}

template <class T> void ParallelModel<T>::Impl::recompute_ffn(int64_t l, const std::string& p, LayerCache<T>& L) const {
  Buffer<T> h = L.h_mid;
  if (m.recompute_ != Recompute::full) test_hook(l, h);  // full: the hook changed the layer's input
  ffn_forward_block(l, p, h, L);
  if (!c.is_moe(l)) return;
  check_recomputed_routing(*m.world_, l, c.seq, L.routed, L.moe.chosen,
                           pmoe_token_ids(chunk, m.tp_, m.cp_, L.moe, m.route_g0), c.top_k);
}

template <class T>
void ParallelModel<T>::Impl::attention_forward_block(const std::string& p, Buffer<T>& h, LayerCache<T>& L) const {
  const int64_t D = c.dim, S = c.seq, Dh = c.head_dim(), Dl = local_dim(p + ".attn.wq", 1), Hl = Dl / Dh;
  L.h_in = h;
  L.a_res = zeros<T>(n_res * D), L.m1 = zeros<T>(n_res), L.r1 = zeros<T>(n_res);
  layernorm_forward(h.data(), w(p + ".ln1.weight").ptr(), w(p + ".ln1.bias").ptr(), n_res, D, L.a_res.data(),
                    L.m1.data(), L.r1.data());
  L.a_full = full(L.a_res, D);
  L.q = zeros<T>(n * Dl), L.k = zeros<T>(n * Dl), L.v = zeros<T>(n * Dl);
  matmul_forward(L.a_full.data(), w(p + ".attn.wq").ptr(), L.q.data(), n, D, Dl);
  matmul_forward(L.a_full.data(), w(p + ".attn.wk").ptr(), L.k.data(), n, D, Dl);
  matmul_forward(L.a_full.data(), w(p + ".attn.wv").ptr(), L.v.data(), n, D, Dl);
  for (Buffer<T>* x : {&L.q, &L.k, &L.v}) to_storage(x->data(), n * Dl);  // storage points (core/precision.h)
  if (m.cp_.size > 1) {
    cp_attention_forward(m.cp_, L.q, L.k, L.v, b, S, Hl, Dh, L.att, L.cp_attn);
  } else {
    L.att = zeros<T>(n * Dl), L.probs = zeros<T>(b * Hl * S * S);
    for (int64_t q = 0; q < b; ++q)
      attention_forward(L.q.data() + q * S * Dl, L.k.data() + q * S * Dl, L.v.data() + q * S * Dl, S, Hl, Dh,
                        L.att.data() + q * S * Dl, L.probs.data() + q * Hl * S * S);
  }
  auto o = zeros<T>(n * D);
  matmul_forward(L.att.data(), w(p + ".attn.wo").ptr(), o.data(), n, Dl, D);
  add_into(h, to_res(std::move(o), D));
  L.h_mid = h;
}

template <class T>
void ParallelModel<T>::Impl::attention_backward_block(const std::string& p, Buffer<T>& dh,
                                                      const LayerCache<T>& L) const {
  const int64_t D = c.dim, S = c.seq, Dh = c.head_dim(), Dl = local_dim(p + ".attn.wq", 1), Hl = Dl / Dh;
  Buffer<T> dout = full(dh, D);
  auto datt = zeros<T>(n * Dl);
  matmul_backward(L.att.data(), w(p + ".attn.wo").ptr(), dout.data(), datt.data(), g(p + ".attn.wo"), n, Dl, D);
  auto dq = zeros<T>(n * Dl), dk = zeros<T>(n * Dl), dv = zeros<T>(n * Dl);
  if (m.cp_.size > 1) cp_attention_backward(m.cp_, L.q, L.cp_attn, datt, b, S, Hl, Dh, dq, dk, dv);
  for (int64_t q = 0; q < b && m.cp_.size == 1; ++q) {
    const int64_t o = q * S * Dl;
    attention_backward(L.q.data() + o, L.k.data() + o, L.v.data() + o, L.probs.data() + q * Hl * S * S,
                       datt.data() + o, S, Hl, Dh, dq.data() + o, dk.data() + o, dv.data() + o);
  }
  auto da = zeros<T>(n * D);
  matmul_backward(L.a_full.data(), w(p + ".attn.wq").ptr(), dq.data(), da.data(), g(p + ".attn.wq"), n, D, Dl);
  matmul_backward(L.a_full.data(), w(p + ".attn.wk").ptr(), dk.data(), da.data(), g(p + ".attn.wk"), n, D, Dl);
  matmul_backward(L.a_full.data(), w(p + ".attn.wv").ptr(), dv.data(), da.data(), g(p + ".attn.wv"), n, D, Dl);
  Buffer<T> da_res = to_res(std::move(da), D);
  layernorm_backward(L.h_in.data(), w(p + ".ln1.weight").ptr(), L.m1.data(), L.r1.data(), da_res.data(), n_res, D,
                     dh.data(), g(p + ".ln1.weight"), g(p + ".ln1.bias"));
}

template <class T> PMoeWeights<T> ParallelModel<T>::Impl::moe_weights(const std::string& p, int64_t l) const {
  PMoeWeights<T> wt{w(p + ".moe.router.gate").ptr(),
                    {w(p + ".moe.experts.w1").ptr(), w(p + ".moe.experts.w3").ptr(), w(p + ".moe.experts.w2").ptr(),
                     local_dim(p + ".moe.experts.w1", 2)},
                    nullptr, nullptr, nullptr, 0, m.expert_bias[static_cast<size_t>(l - c.dense_layers)].data(),
                    RouteFollow{m.route_oracle, l - c.dense_layers, m.route_g0}};
  if (c.shared_experts > 0) {
    wt.sw1 = w(p + ".moe.shared.w1").ptr(), wt.sw3 = w(p + ".moe.shared.w3").ptr(),
    wt.sw2 = w(p + ".moe.shared.w2").ptr();
    wt.Fsl = local_dim(p + ".moe.shared.w1", 1);
  }
  return wt;
}

template <class T>
void ParallelModel<T>::Impl::ffn_forward_block(int64_t l, const std::string& p, Buffer<T>& h,
                                               LayerCache<T>& L) const {
  const int64_t D = c.dim;
  L.bn_res = zeros<T>(n_res * D), L.m2 = zeros<T>(n_res), L.r2 = zeros<T>(n_res);
  layernorm_forward(h.data(), w(p + ".ln2.weight").ptr(), w(p + ".ln2.bias").ptr(), n_res, D, L.bn_res.data(),
                    L.m2.data(), L.r2.data());
  Buffer<T> f;
  if (c.is_moe(l)) {
    pmoe_forward(chunk, m.tp_, m.cp_, m.ep_, moe_weights(p, l), L.bn_res, b, f, L.moe);
  } else {
    L.bn_full = full(L.bn_res, D);
    auto part = zeros<T>(n * D);
    ffn_forward(L.bn_full.data(), n, D, local_dim(p + ".mlp.w1", 1), w(p + ".mlp.w1").ptr(), w(p + ".mlp.w3").ptr(),
                w(p + ".mlp.w2").ptr(), part.data(), L.mlp);
    f = to_res(std::move(part), D);
  }
  add_into(h, f);
}

template <class T>
void ParallelModel<T>::Impl::ffn_backward_block(int64_t l, const std::string& p, Buffer<T>& dh,
                                                const LayerCache<T>& L) const {
  const int64_t D = c.dim;
  auto dbn_res = zeros<T>(n_res * D);
  if (c.is_moe(l)) {
    PMoeWeights<T> wt = moe_weights(p, l);
    PMoeGrads<T> gr{g(p + ".moe.router.gate"), g(p + ".moe.experts.w1"), g(p + ".moe.experts.w3"),
                    g(p + ".moe.experts.w2"), nullptr, nullptr, nullptr};
    if (c.shared_experts > 0)
      gr.sw1 = g(p + ".moe.shared.w1"), gr.sw3 = g(p + ".moe.shared.w3"), gr.sw2 = g(p + ".moe.shared.w2");
    pmoe_backward(chunk, m.tp_, m.cp_, m.ep_, wt, b, L.moe, dh, dbn_res, gr);
  } else {
    Buffer<T> dout = full(dh, D);
    auto dbn = zeros<T>(n * D);
    ffn_backward(L.bn_full.data(), n, D, local_dim(p + ".mlp.w1", 1), w(p + ".mlp.w1").ptr(), w(p + ".mlp.w3").ptr(),
                 w(p + ".mlp.w2").ptr(), L.mlp, dout.data(), dbn.data(), g(p + ".mlp.w1"), g(p + ".mlp.w3"),
                 g(p + ".mlp.w2"));
    dbn_res = to_res(std::move(dbn), D);
  }
  layernorm_backward(L.h_mid.data(), w(p + ".ln2.weight").ptr(), L.m2.data(), L.r2.data(), dbn_res.data(), n_res, D,
                     dh.data(), g(p + ".ln2.weight"), g(p + ".ln2.bias"));
}

template <class T>
ParallelModel<T>::ParallelModel(const Scenario& s, const mesh::Mesh& m, comm::Communicator& world,
                                const std::vector<mesh::TensorLayout>& layouts)
    : cfg_(s.model), recompute_(s.layout.recompute), world_(&world) {
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
  cp_ = {&mesh::comm_group(world, m, GroupKind::cp), m.coord(MeshDim::cp, r), m.size(MeshDim::cp)};
  const int64_t ep_r = m.coord(MeshDim::ep, r), ep_n = m.size(MeshDim::ep);
  const int64_t etp_r = m.coord(MeshDim::etp, r), etp_n = m.size(MeshDim::etp);
  ep_ = {&mesh::comm_group(world, m, GroupKind::ep), &mesh::comm_group(world, m, GroupKind::etp), s.model.experts,
         s.model.experts / ep_n, ep_r * (s.model.experts / ep_n)};
  // Each family's shards live over its home data-parallel group (parallel/reduction_plan.h:
  // dense_dp for the dense families, edp for the routed experts), FSDP over its first part and
  // replicas over its second. Both built here, dense first: the order every rank makes them in.
  const auto groups = [&](GroupKind dp) {
    const StorageParts parts = storage_parts(m, dp);  // layout.dp_sharding: no fsdp part unless fsdp
    return DataParallelGroups{parts.sharded ? &mesh::comm_group(world, m, parts.fsdp) : nullptr,
                              &mesh::comm_group(world, m, parts.replicate)};
  };
  const DataParallelGroups dense = groups(GroupKind::dense_dp), expert = groups(GroupKind::edp);
  const auto specs = param_specs(s.model);
  split_ = pp_stage_layers(s.layout, s.model.layers);
  if (s.layout.pp == 1) split_ = {{0, s.model.layers}};
  else  // this rank's stage runs virtual stages stage, stage + pp, ...; the others stay empty
    for (size_t v = 0; v < split_.size(); ++v)
      if (static_cast<int64_t>(v) % s.layout.pp != m.stage(r)) split_[v] = {0, 0};
  for (size_t p = 0; p < specs.size(); ++p) {
    const int64_t td = mesh::tp_shard_dim(specs[p]);
    const bool routed = specs[p].family == Family::routed_experts;
    std::vector<MpChunk> mp;
    if (routed) mp = {{0, ep_n, ep_r}, {td, etp_n, etp_r}};
    else if (td >= 0) mp = {{td, tp_.size, tp_.rank}};
    params.emplace_back(specs[p], m, layouts[p], r, s.seed, mp,
                        home_dp_group(specs[p].family) == GroupKind::edp ? expert : dense);
    held_.push_back(mesh::holds(m, layouts[p], r) ? 1 : 0);
    // another stage's parameter: no gradient here (an empty accumulator)
    mp_grads.emplace_back(held_.back() ? params.back().mp_shape() : Shape(specs[p].shape.size(), 0));
    index_[specs[p].name] = p;
  }
  expert_bias.assign(static_cast<size_t>(s.model.moe_layers()), Buffer<T>(static_cast<size_t>(s.model.experts), T(0)));
}

template <class T> void ParallelModel<T>::zero_grads() {
  for (auto& t : mp_grads) zero_values(t.ptr(), t.numel());
  gathered_.clear();
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
  return Impl{*this, cfg_, u.b, u.b * chunk.seq, u.b * stream_rows(), chunk};
}

template <class T> void ParallelModel<T>::forward_chunk(PMicro<T>& u, int64_t v) {
  const ModelConfig& c = cfg_;
  Impl I = impl_for(u);
  const int64_t D = c.dim, n = I.n, n_res = I.n_res;
  PMicroResult& res = u.res;
  const auto moe = static_cast<size_t>(c.moe_layers());
  if (res.chosen.size() != moe)
    res.chosen.resize(moe), res.first_row.resize(moe), res.counts.resize(moe), res.followed.resize(moe);
  if (u.caches.empty()) u.caches.resize(static_cast<size_t>(c.layers));
  std::vector<std::string> outer_names;  // the embedding, final LayerNorm and head this stage holds
  for (const char* nm : {"embed.weight", "final_ln.weight", "final_ln.bias", "lm_head.weight"})
    if (index_.count(nm) != 0 && held(index(nm))) outer_names.push_back(nm);
  I.gather(outer_names);
  const bool first = v == 0, last = v + 1 == virtual_stages();
  const ShardedParam<T>& ep = params[index("embed.weight")];
  const int64_t v0 = ep.mp_offset(0), Vl = ep.mp_shape()[0];
  Buffer<T>& h = u.h;  // (n_res, D) residual stream
  if (first) {
    const Tensor<T>& emb = I.w("embed.weight");  // (Vl, D)
    auto e_part = zeros<T>(n * D);
    vp_embedding_forward(u.inputs.data(), n, emb.ptr(), v0, Vl, D, e_part.data());
    h = I.to_res(std::move(e_part), D);
  }
  for (int64_t l = split_[static_cast<size_t>(v)].first; l < split_[static_cast<size_t>(v)].second; ++l) {
    const std::string p = "layers." + std::to_string(l);
    auto& L = u.caches[static_cast<size_t>(l)];
    I.gather_layer(l);  // at the first micro-batch of the step; held after
    I.attention_forward_block(p, h, L);
    I.ffn_forward_block(l, p, h, L);
    if (c.is_moe(l)) I.record_routing(res, l, L);
    drop_for_recompute(L, recompute_);  // what the backward recomputes (recompute none: keeps everything)
  }
  res.saved_bytes = 0;
  for (const auto& L : u.caches) res.saved_bytes += held_bytes(L);
  if (!last) return;
  // head: logits (n, Vl) = LN(h) · W, W (D, Vl) = lm_head's columns or embed's rows^T
  auto hf = zeros<T>(n_res * D), mf = zeros<T>(n_res), rf = zeros<T>(n_res);
  layernorm_forward(h.data(), I.w("final_ln.weight").ptr(), I.w("final_ln.bias").ptr(), n_res, D, hf.data(), mf.data(),
                    rf.data());
  Buffer<T> hf_full = I.full(hf, D);
  Buffer<T> head = c.tie_embeddings ? transpose(I.w("embed.weight").ptr(), Vl, D) : I.w("lm_head.weight").data;
  auto logits = zeros<T>(n * Vl);
  matmul_forward(hf_full.data(), head.data(), logits.data(), n, D, Vl);
  to_storage(logits.data(), n * Vl);  // a storage point; cross-entropy runs in the compute dtype
  VpCeCache<T> ce;
  // bug zoo (core/inject.h): under pipeline parallel the last stage normalises its loss per
  // micro-batch while the other stages' load-balancing terms keep the global count
  static const bool per_micro = injected("pp_loss_per_microbatch_last_stage");
  const double inv_tokens = per_micro && virtual_stages() > 1 ? 1.0 / static_cast<double>(u.share.micro_seqs * c.seq)
                                                             : loss_scale(c, u.b, u.share);
  res.ce = vp_cross_entropy_forward(tp_, logits.data(), u.targets.data(), n, v0, Vl, ce) * inv_tokens;

  auto dlogits = zeros<T>(n * Vl);
  vp_cross_entropy_backward(logits.data(), u.targets.data(), n, v0, Vl, static_cast<T>(inv_tokens), ce,
                            dlogits.data());
  if (injected("cross_entropy_in_bf16"))  // bug zoo (core/inject.h): softmax and its gradient in bf16
    round_to(Low::bf16, dlogits.data(), n * Vl);
  auto dhf = zeros<T>(n * D);
  if (c.tie_embeddings) {
    auto dhead = zeros<T>(D * Vl);
    matmul_backward(hf_full.data(), head.data(), dlogits.data(), dhf.data(), dhead.data(), n, D, Vl);
    add_into(mp_grads[index("embed.weight")].data, transpose(dhead.data(), D, Vl));
  } else {
    matmul_backward(hf_full.data(), head.data(), dlogits.data(), dhf.data(), I.g("lm_head.weight"), n, D, Vl);
  }
  Buffer<T> dhf_res = I.to_res(std::move(dhf), D);
  auto dh = zeros<T>(n_res * D);
  layernorm_backward(h.data(), I.w("final_ln.weight").ptr(), mf.data(), rf.data(), dhf_res.data(), n_res, D,
                     dh.data(), I.g("final_ln.weight"), I.g("final_ln.bias"));
  h = std::move(dh);  // the backward starts from here
}

template <class T> void ParallelModel<T>::backward_chunk(PMicro<T>& u, int64_t v) {
  const ModelConfig& c = cfg_;
  Impl I = impl_for(u);
  const int64_t D = c.dim, n = I.n;
  Buffer<T>& dh = u.h;
  for (int64_t l = split_[static_cast<size_t>(v)].second - 1; l >= split_[static_cast<size_t>(v)].first; --l) {
    const std::string p = "layers." + std::to_string(l);
    LayerCache<T>& L = u.caches[static_cast<size_t>(l)];
    if (recompute_ == Recompute::full) I.recompute_attention(l, p, L);  // the layer's forward again
    if (recomputes_ffn(recompute_)) I.recompute_ffn(l, p, L);
    I.ffn_backward_block(l, p, dh, L);
    if (recompute_ == Recompute::attention) I.recompute_attention(l, p, L);
    I.attention_backward_block(p, dh, L);
    L = LayerCache<T>{};  // this layer's activations are no longer needed
  }
  if (v != 0) return;
  const ShardedParam<T>& ep = params[index("embed.weight")];
  Buffer<T> dh_full = I.full(dh, D);
  vp_embedding_backward(u.inputs.data(), n, dh_full.data(), ep.mp_offset(0), ep.mp_shape()[0], D, I.g("embed.weight"));
}

template class ParallelModel<float>;
template class ParallelModel<double>;

}  // namespace parity
