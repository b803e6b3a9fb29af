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

// Columns [c0, c0 + cols) of a (rows, W) matrix, and their gradient added back.
template <class T> Buffer<T> take_cols(const T* w, int64_t rows, int64_t W, int64_t c0, int64_t cols) {
  Buffer<T> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(w + r * W + c0, cols, out.data() + r * cols);
  return out;
}
template <class T> void add_cols(T* g, const Buffer<T>& part, int64_t rows, int64_t W, int64_t c0, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) g[r * W + c0 + j] += part[static_cast<size_t>(r * cols + j)];
}

}  // namespace

// The key / value columns a lane reads of wk and wv (model.kv_heads): its TP shard whole where
// they are split over tp, or, where the plan replicates them over tp (fewer KV heads than
// lanes, mesh/param_layout.cpp), the one head its query heads share: tp_rank / (tp / kv_heads).
struct KvCols {
  int64_t c0 = 0, cols = 0;
  bool shared = false;  // a replicated head: the lane's dk, dv are its query heads' part only
};

template <class T> struct ParallelModel<T>::Impl {
  ParallelModel<T>& m;
  const ModelConfig& c;
  int64_t b, n, n_res;  // sequences, their tokens, this lane's residual tokens
  ModelConfig chunk;    // c with seq = this rank's context-parallel chunk (S / cp)

  // One allgather per FSDP group for the parameters `qs` (plan indices) not gathered yet in
  // this step (a flat FSDP unit: its dense parameters, and its routed experts), held in
  // m.gathered_ until the next zero_grads().
  void gather(const std::vector<size_t>& qs) const {
    std::vector<const ShardedParam<T>*> dense, experts;
    std::vector<size_t> dense_q, experts_q;
    for (size_t q : qs) {
      if (m.is_gathered_[q]) continue;
      const bool routed = m.params[q].spec().family == Family::routed_experts;
      (routed ? experts : dense).push_back(&m.params[q]), (routed ? experts_q : dense_q).push_back(q);
    }
    for (const auto& [unit, which] : {std::pair{&dense, &dense_q}, std::pair{&experts, &experts_q}}) {
      std::vector<Tensor<T>> got = gather_all(*unit);
      for (size_t i = 0; i < got.size(); ++i) {
        // the compute copy, rounded to its plan entry's format (parallel/param_plan.h); shards stay master
        storage_point(got[i].ptr(), got[i].numel(), m.compute_copy_[(*which)[i]]);
        fp8_weight((*which)[i], got[i]);
        m.gathered_[(*which)[i]] = std::move(got[i]), m.is_gathered_[(*which)[i]] = 1;
      }
    }
  }
  // fp8 (core/fp8.h): a linear's gathered weight quantized to E4M3 as its plan entry says, one scale per
  // tensor (per routed expert) from its amax over every piece: a weight split over TP (ETP for the routed
  // experts) takes the max over those lanes. FSDP gathered it whole already. The same order on every lane,
  // a lane whose piece is empty (an uneven split) included: it joins the reduction with an amax of 0.
  void fp8_weight(size_t q, Tensor<T>& t) const {
    const auto& [on, amax] = m.fp8_weight_[q];
    if (!on) return;
    const ParamSpec& spec = m.params[q].spec();
    const bool routed = spec.family == Family::routed_experts;
    const int64_t blocks = routed ? t.shape[0] : 1;  // this rank's experts
    fp8_tensors(t.ptr(), blocks, blocks == 0 ? 0 : t.numel() / blocks, amax, spec.name,
                routed ? m.ep_.e0 : 0);  // fp8-delayed: its slots (a routed expert's by its global index)
  }
  const Tensor<T>& w(size_t q) const {
    if (!m.is_gathered_[q]) throw Error("ParallelModel: " + m.params[q].spec().name + " read before its gather");
    return m.gathered_[q];
  }
  // The zoo's fp8_partial_sum_quantized: under fp8 with tp > 1, a row-parallel linear's output (wo's, the
  // dense MLP's w2's), this lane's partial sum, quantized to E4M3 before the TP reduction (the reduce-scatter
  // compressed to fp8), each row with the lane's own current scale from its partial's amax. One device
  // never quantizes a linear's output; a no-op without the bug.
  void partial_sum_quantized(T* x, int64_t rows, int64_t k) const {
    static const bool on = injected("fp8_partial_sum_quantized");
    if (!on || !fp8_on() || m.tp_.size < 2) return;
    for (int64_t r = 0; r < rows; ++r) {
      T* row = x + r * k;
      float amax = 0;
      for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(static_cast<float>(row[j])));
      const float s = fp8_scale(Fp8::e4m3, amax), inv = 1.0f / s;
      for (int64_t j = 0; j < k; ++j)
        row[j] = static_cast<T>(round_fp8(Fp8::e4m3, static_cast<float>(row[j]) * s) * inv);
    }
  }
  T* g(size_t q) const { return m.mp_grads[q].ptr(); }
  // A parameter the model may not have (kNoParam: a norm's bias under RMSNorm): null then.
  const T* w_or_null(size_t q) const { return q == kNoParam ? nullptr : w(q).ptr(); }
  T* g_or_null(size_t q) const { return q == kNoParam ? nullptr : g(q); }
  int64_t local_dim(size_t q, size_t d) const { return m.params[q].mp_shape()[d]; }
  // model.position rope: the rotation of this rank's q and k rows (b sequences of chunk.seq rows,
  // Hl heads) by their GLOBAL positions (the context-parallel chunk's, in its order). The bug zoo
  // (core/inject.h): rope_local_positions_cp, every chunk rotated as if it began the sequence;
  // rope_contiguous_positions_balanced_cp, the contiguous order's positions under the balanced one.
  Rope<T> rope(int64_t Hl) const {
    static const bool local_bug = injected("rope_local_positions_cp"),
                      chunk_bug = injected("rope_contiguous_positions_balanced_cp");
    const int64_t Sc = chunk.seq;
    std::vector<int64_t> pos = local_bug ? rope_positions(b, Sc, 0)
                               : chunk_bug ? rope_positions(b, Sc, m.cp_.rank * Sc)
                                           : m.cp_.positions(b, c.seq);
    return Rope<T>(pos, Hl, c.head_dim(), c.rope_theta);
  }
  // The bug zoo's qk_norm_after_rope: the rotation before the QK-norm instead of after it.
  bool rope_first() const {
    static const bool bug = injected("qk_norm_after_rope");
    return bug && c.qk_norm && c.position == Position::rope;
  }
  Buffer<T> full(const Buffer<T>& res, int64_t W) const { return tp_to_full(m.tp_, res, b, chunk.seq, W); }
  Buffer<T> to_res(Buffer<T> part, int64_t W) const { return tp_sum_to_res(m.tp_, std::move(part), b, chunk.seq, W); }
  // A traced tensor (model/trace.h) of `cols` columns, [col0, col0 + cols) of full (-1: all).
  void rec(trace::Site s, int64_t l, trace::Dir d, const Buffer<T>& x, int64_t cols,
           trace::Rows rows = trace::Rows::stream, int64_t col0 = 0, int64_t full = -1) const {
    // a lane without columns of it (a vocab of 24 over tp 7 leaves the last lane none) holds nothing
    // to trace; its division by zero crashed a build whose compiler hoisted it above record's check
    if (cols <= 0) return;
    trace::record(s, l, d, x.data(), static_cast<int64_t>(x.size()) / cols, cols, rows, col0, full);
  }
  // This lane's heads of a projection's output: columns from wq's own offset (a column split over tp).
  void rec_heads(trace::Site s, int64_t l, trace::Dir d, const Buffer<T>& x, size_t q) const {
    rec(s, l, d, x, local_dim(q, 1), trace::Rows::chunk, m.params[q].mp_offset(1), c.dim);
  }
  int64_t layer_of(const LayerParams& P) const { return &P - m.layer_.data(); }
  KvCols kv_cols(const LayerParams& P) const {
    const int64_t local = local_dim(P.wk, 1), Dh = c.head_dim();
    if (m.tp_.size == 1 || local != c.kv_dim()) return {0, local, false};  // split over tp (or no tp)
    return {(m.tp_.rank / (m.tp_.size / c.kv())) * Dh, Dh, true};
  }
  // k or v = a · W[:, kc] (n, kc.cols), and its backward (W's gradient into kc's columns).
  void kv_project(const Buffer<T>& a, size_t q, const KvCols& kc, Buffer<T>& out) const {
    const int64_t D = c.dim, Wd = local_dim(q, 1);
    if (!kc.shared) return matmul_forward(a.data(), w(q).ptr(), out.data(), n, D, Wd);
    matmul_forward(a.data(), take_cols(w(q).ptr(), D, Wd, kc.c0, kc.cols).data(), out.data(), n, D, kc.cols);
  }
  void kv_project_backward(const Buffer<T>& a, size_t q, const KvCols& kc, const Buffer<T>& dy, Buffer<T>& da) const {
    const int64_t D = c.dim, Wd = local_dim(q, 1);
    if (!kc.shared) return matmul_backward(a.data(), w(q).ptr(), dy.data(), da.data(), g(q), n, D, Wd);
    auto gw = zeros<T>(D * kc.cols);
    matmul_backward(a.data(), take_cols(w(q).ptr(), D, Wd, kc.c0, kc.cols).data(), dy.data(), da.data(), gw.data(),
                    n, D, kc.cols);
    add_cols(g(q), gw, D, Wd, kc.c0, kc.cols);
  }
  // A key / value record: this lane's columns of the (., kv_heads·Dh) tensor.
  void rec_kv(trace::Site s, int64_t l, trace::Dir d, const Buffer<T>& x, const LayerParams& P,
              const KvCols& kc) const {
    const int64_t c0 = kc.shared ? kc.c0 : m.params[P.wk].mp_offset(1);
    rec(s, l, d, x, kc.cols, trace::Rows::chunk, c0, c.kv_dim());
  }
  // A replicated head's dk or dv on this lane is its query heads' part only: for the trace, each
  // lane's part placed at its head's columns and summed over the tp group (the lanes sharing a head
  // add their parts, the others exact 0s), so every lane records the whole gradient. Traced only:
  // the step sums the weights' gradients itself (param_plan.cpp).
  void rec_kv_summed(trace::Site s, int64_t l, const Buffer<T>& x, const KvCols& kc) const {
    const trace::Recorder* r = trace::active();
    if (r == nullptr || r->paused > 0) return;
    const int64_t K = c.kv_dim();
    auto whole = zeros<T>(n * K);
    for (int64_t row = 0; row < n; ++row)
      copy_values(whole.data() + row * K + kc.c0, x.data() + row * kc.cols, kc.cols);
    tp_allreduce(m.tp_, whole);
    rec(s, l, trace::Dir::bwd, whole, K, trace::Rows::chunk, 0, K);
  }

  void attention_forward_block(const LayerParams& P, Buffer<T>& h, LayerCache<T>& L) const;
  void attention_backward_block(const LayerParams& P, Buffer<T>& dh, const LayerCache<T>& L) const;
  void ffn_forward_block(int64_t l, const LayerParams& P, Buffer<T>& h, LayerCache<T>& L) const;
  void ffn_backward_block(int64_t l, const LayerParams& P, Buffer<T>& dh, const LayerCache<T>& L) const;
  PMoeWeights<T> moe_weights(const LayerParams& P, int64_t l) const;
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
  void recompute_attention(int64_t l, const LayerParams& P, LayerCache<T>& L) const;
  void recompute_ffn(int64_t l, const LayerParams& P, LayerCache<T>& L) const;
};

namespace {
template <class T> void test_hook(int64_t l, Buffer<T>& saved) {
  if constexpr (std::is_same_v<T, double>)
    if (const auto& hook = recompute_test_hook()) hook(l, std::span<double>(saved.data(), saved.size()));
}
}  // namespace

template <class T>
void ParallelModel<T>::Impl::recompute_attention(int64_t l, const LayerParams& P, LayerCache<T>& L) const {
  const trace::Pause no_trace;  // recorded in the forward
  Buffer<T> h = L.h_in;
  test_hook(l, h);
  attention_forward_block(P, h, L);  // L.h_in, L.h_mid: the values they held
}

template <class T> void ParallelModel<T>::Impl::recompute_ffn(int64_t l, const LayerParams& P, LayerCache<T>& L) const {
  const trace::Pause no_trace;  // recorded in the forward
  Buffer<T> h = L.h_mid;
  if (m.recompute_ != Recompute::full) test_hook(l, h);  // full: the hook changed the layer's input
  ffn_forward_block(l, P, h, L);
  if (!c.is_moe(l)) return;
  check_recomputed_routing(*m.world_, l, c.seq, L.routed, L.moe.chosen,
                           pmoe_token_ids(chunk, m.tp_, m.cp_, L.moe, m.route_g0), c.top_k);
}

template <class T>
void ParallelModel<T>::Impl::attention_forward_block(const LayerParams& P, Buffer<T>& h, LayerCache<T>& L) const {
  using trace::Dir, trace::Site;
  const int64_t D = c.dim, S = c.seq, Dh = c.head_dim(), Dl = local_dim(P.wq, 1), Hl = Dl / Dh, l = layer_of(P);
  L.h_in = h;
  L.a_res = zeros<T>(n_res * D), L.m1 = zeros<T>(n_res), L.r1 = zeros<T>(n_res);
  norm_forward(c.norm, h.data(), w(P.ln1_w).ptr(), w_or_null(P.ln1_b), n_res, D, L.a_res.data(), L.m1.data(),
               L.r1.data());
  rec(Site::ln1, l, Dir::fwd, L.a_res, D);
  L.a_full = full(L.a_res, D);
  const Fp8SiteScope site(l, "attn");  // fp8-delayed: the attention's slots (model.cpp's order)
  fp8_rows(Fp8::e4m3, L.a_full.data(), n, D, false);  // fp8: the projections' input, whole rows (model.cpp)
  const KvCols kc = kv_cols(P);
  const int64_t Dkl = kc.cols, Gl = Dkl / Dh;  // this lane's key / value columns and heads
  L.q = zeros<T>(n * Dl), L.k = zeros<T>(n * Dkl), L.v = zeros<T>(n * Dkl);
  matmul_forward(L.a_full.data(), w(P.wq).ptr(), L.q.data(), n, D, Dl);
  kv_project(L.a_full, P.wk, kc, L.k);
  kv_project(L.a_full, P.wv, kc, L.v);
  for (Buffer<T>* x : {&L.q, &L.k, &L.v}) storage_point(x->data(), static_cast<int64_t>(x->size()));  // storage points
  if (rope_first()) rope(Hl).apply(L.q), rope(Gl).apply(L.k);
  if (c.qk_norm) {  // each of this lane's heads RMS-normalised over Dh: rows (n * Hl, Dh), as the model's
    L.q_raw = std::move(L.q), L.k_raw = std::move(L.k);
    L.q = zeros<T>(n * Dl), L.k = zeros<T>(n * Dkl), L.rq = zeros<T>(n * Hl), L.rk = zeros<T>(n * Gl);
    rmsnorm_forward(L.q_raw.data(), w(P.qn).ptr(), n * Hl, Dh, L.q.data(), L.rq.data());
    rmsnorm_forward(L.k_raw.data(), w(P.kn).ptr(), n * Gl, Dh, L.k.data(), L.rk.data());
  }
  if (c.position == Position::rope && !rope_first()) rope(Hl).apply(L.q), rope(Gl).apply(L.k);  // as the model's
  const AttnHeads hd{Hl, Gl, Dh};
  if (m.cp_.size > 1) {
    cp_attention_forward(m.cp_, L.q, L.k, L.v, b, S, hd, L.att, L.cp_attn);
  } else {
    L.att = zeros<T>(n * Dl), L.probs = zeros<T>(b * Hl * S * S);
    for (int64_t q = 0; q < b; ++q)
      attention_forward(L.q.data() + q * S * Dl, L.k.data() + q * S * Dkl, L.v.data() + q * S * Dkl, S, hd,
                        L.att.data() + q * S * Dl, L.probs.data() + q * Hl * S * S);
  }
  rec_heads(Site::q, l, Dir::fwd, L.q, P.wq);
  rec_kv(Site::k, l, Dir::fwd, L.k, P, kc), rec_kv(Site::v, l, Dir::fwd, L.v, P, kc);
  rec_heads(Site::attn, l, Dir::fwd, L.att, P.wq);
  auto o = zeros<T>(n * D);
  fp8_rows(Fp8::e4m3, L.att.data(), n, Dl, true);  // fp8: wo's input, a row split over the lanes' heads
  matmul_forward(L.att.data(), w(P.wo).ptr(), o.data(), n, Dl, D);
  partial_sum_quantized(o.data(), n, D);  // the zoo's fp8_partial_sum_quantized
  const Buffer<T> o_res = to_res(std::move(o), D);  // the row-parallel partial sums, reduced
  rec(Site::attn_out, l, Dir::fwd, o_res, D);
  add_into(h, o_res);
  L.h_mid = h;
  rec(Site::h_mid, l, Dir::fwd, h, D);
}

template <class T>
void ParallelModel<T>::Impl::attention_backward_block(const LayerParams& P, Buffer<T>& dh,
                                                      const LayerCache<T>& L) const {
  using trace::Dir, trace::Site;
  const int64_t D = c.dim, S = c.seq, Dh = c.head_dim(), Dl = local_dim(P.wq, 1), Hl = Dl / Dh, l = layer_of(P);
  rec(Site::h_mid, l, Dir::bwd, dh, D);
  Buffer<T> dout = full(dh, D);
  const Fp8SiteScope site(l, "attn");             // fp8-delayed: the attention's slots
  fp8_rows(Fp8::e5m2, dout.data(), n, D, false);  // fp8: wo's output gradient, whole rows
  auto datt = zeros<T>(n * Dl);
  matmul_backward(L.att.data(), w(P.wo).ptr(), dout.data(), datt.data(), g(P.wo), n, Dl, D);
  rec_heads(Site::attn, l, Dir::bwd, datt, P.wq);
  const KvCols kc = kv_cols(P);
  const int64_t Dkl = kc.cols, Gl = Dkl / Dh;
  const AttnHeads hd{Hl, Gl, Dh};
  auto dq = zeros<T>(n * Dl), dk = zeros<T>(n * Dkl), dv = zeros<T>(n * Dkl);
  if (m.cp_.size > 1) cp_attention_backward(m.cp_, L.q, L.cp_attn, datt, b, S, hd, dq, dk, dv);
  for (int64_t q = 0; q < b && m.cp_.size == 1; ++q) {
    const int64_t o = q * S * Dl, ok = q * S * Dkl;
    attention_backward(L.q.data() + o, L.k.data() + ok, L.v.data() + ok, L.probs.data() + q * Hl * S * S,
                       datt.data() + o, S, hd, dq.data() + o, dk.data() + ok, dv.data() + ok);
  }
  // q's and k's gradient where their forward is traced: as attention reads them (after QK-norm and rope)
  if (!kc.shared)
    rec_kv(Site::v, l, Dir::bwd, dv, P, kc), rec_kv(Site::k, l, Dir::bwd, dk, P, kc);
  else  // a shared head's dk, dv here are this lane's query heads' part: summed over the lanes to trace
    rec_kv_summed(Site::v, l, dv, kc), rec_kv_summed(Site::k, l, dk, kc);
  rec_heads(Site::q, l, Dir::bwd, dq, P.wq);
  if (c.position == Position::rope && !rope_first())  // back through the rotation
    dq = rope(Hl).undo(dq), dk = rope(Gl).undo(dk);
  if (c.qk_norm) {  // through the QK-norm; its weights' gradient is this lane's heads' part (param_plan.cpp)
    auto dq_raw = zeros<T>(n * Dl), dk_raw = zeros<T>(n * Dkl);
    rmsnorm_backward(L.q_raw.data(), w(P.qn).ptr(), L.rq.data(), dq.data(), n * Hl, Dh, dq_raw.data(), g(P.qn));
    rmsnorm_backward(L.k_raw.data(), w(P.kn).ptr(), L.rk.data(), dk.data(), n * Gl, Dh, dk_raw.data(), g(P.kn));
    dq = std::move(dq_raw), dk = std::move(dk_raw);
  }
  if (rope_first()) dq = rope(Hl).undo(dq), dk = rope(Gl).undo(dk);
  auto da = zeros<T>(n * D);
  fp8_rows(Fp8::e5m2, dq.data(), n, Dl, true);  // fp8: the projections' output gradients, rows split by heads
  fp8_rows(Fp8::e5m2, dk.data(), n, Dkl, true);
  fp8_rows(Fp8::e5m2, dv.data(), n, Dkl, true);
  matmul_backward(L.a_full.data(), w(P.wq).ptr(), dq.data(), da.data(), g(P.wq), n, D, Dl);
  kv_project_backward(L.a_full, P.wk, kc, dk, da);
  kv_project_backward(L.a_full, P.wv, kc, dv, da);
  Buffer<T> da_res = to_res(std::move(da), D);
  rec(Site::ln1, l, Dir::bwd, da_res, D);
  norm_backward(c.norm, L.h_in.data(), w(P.ln1_w).ptr(), L.m1.data(), L.r1.data(), da_res.data(), n_res, D,
                dh.data(), g(P.ln1_w), g_or_null(P.ln1_b));
}

template <class T> PMoeWeights<T> ParallelModel<T>::Impl::moe_weights(const LayerParams& P, int64_t l) const {
  PMoeWeights<T> wt{w(P.gate).ptr(),
                    {w(P.w1).ptr(), w(P.w3).ptr(), w(P.w2).ptr(),
                     local_dim(P.w1, 2)},
                    nullptr, nullptr, nullptr, 0, m.expert_bias[static_cast<size_t>(l - c.dense_layers)].data(),
                    RouteFollow{m.route_oracle, l - c.dense_layers, m.route_g0}};
  if (c.shared_experts > 0) {
    wt.sw1 = w(P.sw1).ptr(), wt.sw3 = w(P.sw3).ptr(),
    wt.sw2 = w(P.sw2).ptr();
    wt.Fsl = local_dim(P.sw1, 1);
  }
  return wt;
}

template <class T>
void ParallelModel<T>::Impl::ffn_forward_block(int64_t l, const LayerParams& P, Buffer<T>& h,
                                               LayerCache<T>& L) const {
  const int64_t D = c.dim;
  L.bn_res = zeros<T>(n_res * D), L.m2 = zeros<T>(n_res), L.r2 = zeros<T>(n_res);
  norm_forward(c.norm, h.data(), w(P.ln2_w).ptr(), w_or_null(P.ln2_b), n_res, D, L.bn_res.data(), L.m2.data(),
               L.r2.data());
  rec(trace::Site::ln2, l, trace::Dir::fwd, L.bn_res, D);
  Buffer<T> f;
  if (c.is_moe(l)) {
    pmoe_forward(chunk, m.tp_, m.cp_, m.ep_, moe_weights(P, l), L.bn_res, b, f, L.moe);
  } else {
    L.bn_full = full(L.bn_res, D);
    auto part = zeros<T>(n * D);
    const Fp8SiteScope site(l, "mlp");  // fp8-delayed: the MLP's slots
    ffn_forward(L.bn_full.data(), n, D, local_dim(P.w1, 1), w(P.w1).ptr(), w(P.w3).ptr(),
                w(P.w2).ptr(), part.data(), L.mlp);
    partial_sum_quantized(part.data(), n, D);  // the zoo's fp8_partial_sum_quantized
    f = to_res(std::move(part), D);
  }
  rec(trace::Site::ffn_out, l, trace::Dir::fwd, f, D);
  add_into(h, f);
  rec(trace::Site::h_out, l, trace::Dir::fwd, h, D);
}

template <class T>
void ParallelModel<T>::Impl::ffn_backward_block(int64_t l, const LayerParams& P, Buffer<T>& dh,
                                                const LayerCache<T>& L) const {
  const int64_t D = c.dim;
  rec(trace::Site::h_out, l, trace::Dir::bwd, dh, D);
  auto dbn_res = zeros<T>(n_res * D);
  if (c.is_moe(l)) {
    PMoeWeights<T> wt = moe_weights(P, l);
    PMoeGrads<T> gr{g(P.gate), g(P.w1), g(P.w3),
                    g(P.w2), nullptr, nullptr, nullptr};
    if (c.shared_experts > 0)
      gr.sw1 = g(P.sw1), gr.sw3 = g(P.sw3), gr.sw2 = g(P.sw2);
    pmoe_backward(chunk, m.tp_, m.cp_, m.ep_, wt, b, L.moe, dh, dbn_res, gr);
  } else {
    Buffer<T> dout = full(dh, D);
    auto dbn = zeros<T>(n * D);
    const Fp8SiteScope site(l, "mlp");  // fp8-delayed: the MLP's slots
    ffn_backward(L.bn_full.data(), n, D, local_dim(P.w1, 1), w(P.w1).ptr(), w(P.w3).ptr(),
                 w(P.w2).ptr(), L.mlp, dout.data(), dbn.data(), g(P.w1), g(P.w3),
                 g(P.w2));
    dbn_res = to_res(std::move(dbn), D);
  }
  rec(trace::Site::ln2, l, trace::Dir::bwd, dbn_res, D);
  norm_backward(c.norm, L.h_mid.data(), w(P.ln2_w).ptr(), L.m2.data(), L.r2.data(), dbn_res.data(), n_res, D,
                dh.data(), g(P.ln2_w), g_or_null(P.ln2_b));
}

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
