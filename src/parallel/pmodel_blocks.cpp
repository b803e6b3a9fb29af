// A layer's attention and FFN blocks of the parallel model, forward and backward, and their
// recompute (ParallelModel<T>::Impl, parallel/pmodel_impl.h).
#include <span>
#include <type_traits>

#include "ops/attention.h"
#include "ops/norm.h"
#include "ops/swiglu.h"
#include "mesh/param_layout.h"
#include "parallel/pmodel_impl.h"
#include "parallel/recompute.h"

namespace parity {

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
  if (kc.shared && fp8_on()) dk = kv_summed(dk, kc), dv = kv_summed(dv, kc);  // whole rows to quantize
  fp8_rows(Fp8::e5m2, dq.data(), n, Dl, true);  // fp8: the projections' output gradients, rows split by heads
  fp8_rows(Fp8::e5m2, dk.data(), n, Dkl, true);
  fp8_rows(Fp8::e5m2, dv.data(), n, Dkl, true);
  matmul_backward(L.a_full.data(), w(P.wq).ptr(), dq.data(), da.data(), g(P.wq), n, D, Dl);
  if (kv_backward_here(kc)) kv_project_backward(L.a_full, P.wk, kc, dk, da);
  if (kv_backward_here(kc)) kv_project_backward(L.a_full, P.wv, kc, dv, da);
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

template struct ParallelModel<float>::Impl;
template struct ParallelModel<double>::Impl;

}  // namespace parity
