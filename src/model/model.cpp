#include "model/model.h"
#include "ops/elementwise.h"

#include "core/fp8.h"
#include "core/fp8_delayed.h"
#include "core/precision.h"

#include <optional>

#include <string>

#include "model/moe.h"
#include "model/trace.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/norm.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace parity {

namespace {

// Pointers into a ParamSet for one layer, by MODEL.md name.
template <class T> struct LayerRefs {
  T *ln1w, *ln1b, *wq, *wk, *wv, *wo, *ln2w, *ln2b;
  T *w1 = nullptr, *w3 = nullptr, *w2 = nullptr;  // dense MLP or routed experts
  T *gate = nullptr, *sw1 = nullptr, *sw3 = nullptr, *sw2 = nullptr;
  T *qn = nullptr, *kn = nullptr;  // the QK-norm weights (Dh) under model.qk_norm
};

template <class T> LayerRefs<T> layer_refs(ParamSet<T>& p, const ModelConfig& c, int64_t l) {
  const std::string pre = "layers." + std::to_string(l);
  auto at = [&](const std::string& s) { return p[pre + s].ptr(); };
  const bool bias = c.norm == NormKind::layernorm;  // RMSNorm has no bias
  LayerRefs<T> r{at(".ln1.weight"), bias ? at(".ln1.bias") : nullptr, at(".attn.wq"), at(".attn.wk"),
                 at(".attn.wv"),    at(".attn.wo"),  at(".ln2.weight"), bias ? at(".ln2.bias") : nullptr};
  if (c.qk_norm) r.qn = at(".attn.q_norm.weight"), r.kn = at(".attn.k_norm.weight");
  const std::string ffn = c.is_moe(l) ? ".moe.experts" : ".mlp";
  r.w1 = at(ffn + ".w1");
  r.w3 = at(ffn + ".w3");
  r.w2 = at(ffn + ".w2");
  if (c.is_moe(l)) {
    r.gate = at(".moe.router.gate");
    if (c.shared_experts > 0) {
      r.sw1 = at(".moe.shared.w1");
      r.sw3 = at(".moe.shared.w3");
      r.sw2 = at(".moe.shared.w2");
    }
  }
  return r;
}

template <class T> struct RefLayerCache {
  Buffer<T> h_in, a, m1, r1, q, k, v, att, probs, h_mid, bn, m2, r2;  // see layer_forward
  Buffer<T> q_raw, k_raw, rq, rk;  // QK-norm: q and k before it, its rstd per (token, head)
  FfnCache<T> mlp;
  MoeCache<T> moe;
};

// fp8 (core/fp8.h): a copy of an output gradient dy (n, m) quantized to E5M2 per row; empty otherwise.
template <class T> Buffer<T> fp8_grad(const T* dy, int64_t n, int64_t m) {
  if (!fp8_on()) return {};
  Buffer<T> q = copy_of(dy, n * m);
  fp8_rows(Fp8::e5m2, q.data(), n, m, false);
  return q;
}

template <class T> MoeWeights<T> moe_weights(const LayerRefs<T>& r, const T* bias, RouteFollow follow = {}) {
  return {r.gate, r.w1, r.w3, r.w2, r.sw1, r.sw3, r.sw2, bias, follow};
}

// h (n, D) in place: h += Attn(LN1(h)); h += FFN-or-MoE(LN2(h)).
template <class T>
void layer_forward(const ModelConfig& c, const LayerRefs<T>& w, const T* bias, int64_t n, T* h, RefLayerCache<T>& L,
                   const RouteFollow& follow, int64_t l) {
  using trace::Dir, trace::Site;
  const int64_t D = c.dim, S = c.seq, H = c.heads, Dh = c.head_dim(), nseq = n / S;
  L.h_in = copy_of(h, n * D);
  std::optional<Fp8SiteScope> site(std::in_place, l, "attn");  // fp8-delayed: the attention's slots
  L.a = zeros<T>(n * D), L.m1 = zeros<T>(n), L.r1 = zeros<T>(n);
  norm_forward(c.norm, h, w.ln1w, w.ln1b, n, D, L.a.data(), L.m1.data(), L.r1.data());
  trace::record(Site::ln1, l, Dir::fwd, L.a.data(), n, D);
  fp8_rows(Fp8::e4m3, L.a.data(), n, D, false);  // fp8 (core/fp8.h): wq's, wk's and wv's input, per row
  const int64_t G = c.kv(), Dk = c.kv_dim();  // key / value heads and their columns
  L.q = zeros<T>(n * D), L.k = zeros<T>(n * Dk), L.v = zeros<T>(n * Dk);
  matmul_forward(L.a.data(), w.wq, L.q.data(), n, D, D);
  matmul_forward(L.a.data(), w.wk, L.k.data(), n, D, Dk);
  matmul_forward(L.a.data(), w.wv, L.v.data(), n, D, Dk);
  for (Buffer<T>* x : {&L.q, &L.k, &L.v}) storage_point(x->data(), static_cast<int64_t>(x->size()));  // storage points
  if (c.qk_norm) {  // each head's q and k RMS-normalised over Dh: rows (n * H, Dh) and (n * G, Dh)
    L.q_raw = std::move(L.q), L.k_raw = std::move(L.k);
    L.q = zeros<T>(n * D), L.k = zeros<T>(n * Dk), L.rq = zeros<T>(n * H), L.rk = zeros<T>(n * G);
    rmsnorm_forward(L.q_raw.data(), w.qn, n * H, Dh, L.q.data(), L.rq.data());
    rmsnorm_forward(L.k_raw.data(), w.kn, n * G, Dh, L.k.data(), L.rk.data());
  }
  if (c.position == Position::rope) {  // q and k rotated by position, after the QK-norm (Qwen3's order)
    const std::vector<int64_t> pos = rope_positions(nseq, S, 0);
    Rope<T>(pos, H, Dh, c.rope_theta).apply(L.q);
    Rope<T>(pos, G, Dh, c.rope_theta).apply(L.k);
  }
  const AttnHeads hd{H, G, Dh};
  L.att = zeros<T>(n * D), L.probs = zeros<T>(nseq * H * S * S);
  for (int64_t q = 0; q < nseq; ++q)
    attention_forward(L.q.data() + q * S * D, L.k.data() + q * S * Dk, L.v.data() + q * S * Dk, S, hd,
                      L.att.data() + q * S * D, L.probs.data() + q * H * S * S);
  for (auto [s, x] : {std::pair{Site::q, &L.q}, {Site::attn, &L.att}}) trace::record(s, l, Dir::fwd, x->data(), n, D);
  for (auto [s, x] : {std::pair{Site::k, &L.k}, {Site::v, &L.v}}) trace::record(s, l, Dir::fwd, x->data(), n, Dk);
  auto o = zeros<T>(n * D);  // (n, D)
  fp8_rows(Fp8::e4m3, L.att.data(), n, D, true);  // fp8: wo's input (a row a layout splits over its heads)
  matmul_forward(L.att.data(), w.wo, o.data(), n, D, D);
  trace::record(Site::attn_out, l, Dir::fwd, o.data(), n, D);
  add_into(h, o.data(), n * D);
  L.h_mid = copy_of(h, n * D);
  trace::record(Site::h_mid, l, Dir::fwd, h, n, D);
  L.bn = zeros<T>(n * D), L.m2 = zeros<T>(n), L.r2 = zeros<T>(n);
  norm_forward(c.norm, h, w.ln2w, w.ln2b, n, D, L.bn.data(), L.m2.data(), L.r2.data());
  trace::record(Site::ln2, l, Dir::fwd, L.bn.data(), n, D);
  auto f = zeros<T>(n * D);  // (n, D)
  site.reset();  // fp8-delayed: the MLP's slots (the MoE sets its modules' own)
  if (w.gate) {
    moe_forward(c, moe_weights(w, bias, follow), L.bn.data(), n, f.data(), L.moe);
  } else {
    const Fp8SiteScope mlp(l, "mlp");
    ffn_forward(L.bn.data(), n, D, c.mlp_hidden, w.w1, w.w3, w.w2, f.data(), L.mlp);
  }
  trace::record(Site::ffn_out, l, Dir::fwd, f.data(), n, D);
  add_into(h, f.data(), n * D);
  trace::record(Site::h_out, l, Dir::fwd, h, n, D);
}

// dh (n, D) in place: from d(layer output) to d(layer input); parameter grads +=.
template <class T>
void layer_backward(const ModelConfig& c, const LayerRefs<T>& w, const LayerRefs<T>& g, const T* bias, int64_t n,
                    const RefLayerCache<T>& L, T* dh, int64_t l) {
  using trace::Dir, trace::Site;
  const int64_t D = c.dim, S = c.seq, H = c.heads, Dh = c.head_dim(), nseq = n / S;
  trace::record(Site::h_out, l, Dir::bwd, dh, n, D);
  auto dbn = zeros<T>(n * D);
  if (w.gate) {
    moe_backward(c, moe_weights(w, bias, RouteFollow{nullptr, l - c.dense_layers, 0}), L.bn.data(), n, L.moe, dh,
                 dbn.data(), MoeGrads<T>{g.gate, g.w1, g.w3, g.w2, g.sw1, g.sw3, g.sw2});  // the layer: traces
  } else {
    const Fp8SiteScope mlp(l, "mlp");  // fp8-delayed: the MLP's slots
    ffn_backward(L.bn.data(), n, D, c.mlp_hidden, w.w1, w.w3, w.w2, L.mlp, dh, dbn.data(), g.w1, g.w3, g.w2);
  }
  trace::record(Site::ln2, l, Dir::bwd, dbn.data(), n, D);
  norm_backward(c.norm, L.h_mid.data(), w.ln2w, L.m2.data(), L.r2.data(), dbn.data(), n, D, dh, g.ln2w, g.ln2b);
  trace::record(Site::h_mid, l, Dir::bwd, dh, n, D);

  auto datt = zeros<T>(n * D);
  const Fp8SiteScope site(l, "attn");         // fp8-delayed: the attention's slots
  const Buffer<T> dout = fp8_grad(dh, n, D);  // fp8: wo's output gradient, E5M2 per row
  matmul_backward(L.att.data(), w.wo, fp8_on() ? dout.data() : dh, datt.data(), g.wo, n, D, D);
  trace::record(Site::attn, l, Dir::bwd, datt.data(), n, D);
  const int64_t G = c.kv(), Dk = c.kv_dim();
  const AttnHeads hd{H, G, Dh};
  auto dq = zeros<T>(n * D), dk = zeros<T>(n * Dk), dv = zeros<T>(n * Dk);
  for (int64_t q = 0; q < nseq; ++q) {
    const int64_t o = q * S * D, ok = q * S * Dk;
    attention_backward(L.q.data() + o, L.k.data() + ok, L.v.data() + ok, L.probs.data() + q * H * S * S,
                       datt.data() + o, S, hd, dq.data() + o, dk.data() + ok, dv.data() + ok);
  }
  // q's and k's gradient where their forward is traced: as attention reads them (after QK-norm and rope)
  trace::record(Site::k, l, Dir::bwd, dk.data(), n, Dk);
  trace::record(Site::q, l, Dir::bwd, dq.data(), n, D);
  if (c.position == Position::rope) {  // back through the rotation
    const std::vector<int64_t> pos = rope_positions(nseq, S, 0);
    dq = Rope<T>(pos, H, Dh, c.rope_theta).undo(dq), dk = Rope<T>(pos, G, Dh, c.rope_theta).undo(dk);
  }
  if (c.qk_norm) {  // through the QK-norm: dq, dk of the raw projections
    auto dq_raw = zeros<T>(n * D), dk_raw = zeros<T>(n * Dk);
    rmsnorm_backward(L.q_raw.data(), w.qn, L.rq.data(), dq.data(), n * H, Dh, dq_raw.data(), g.qn);
    rmsnorm_backward(L.k_raw.data(), w.kn, L.rk.data(), dk.data(), n * G, Dh, dk_raw.data(), g.kn);
    dq = std::move(dq_raw), dk = std::move(dk_raw);
  }
  trace::record(Site::v, l, Dir::bwd, dv.data(), n, Dk);
  auto da = zeros<T>(n * D);
  fp8_rows(Fp8::e5m2, dq.data(), n, D, true);  // fp8: the projections' output gradients, rows split by heads
  fp8_rows(Fp8::e5m2, dk.data(), n, Dk, true);
  fp8_rows(Fp8::e5m2, dv.data(), n, Dk, true);
  matmul_backward(L.a.data(), w.wq, dq.data(), da.data(), g.wq, n, D, D);
  matmul_backward(L.a.data(), w.wk, dk.data(), da.data(), g.wk, n, D, Dk);
  matmul_backward(L.a.data(), w.wv, dv.data(), da.data(), g.wv, n, D, Dk);
  trace::record(Site::ln1, l, Dir::bwd, da.data(), n, D);
  norm_backward(c.norm, L.h_in.data(), w.ln1w, L.m1.data(), L.r1.data(), da.data(), n, D, dh, g.ln1w, g.ln1b);
}


}  // namespace

template <class T>
Model<T>::Model(const ModelConfig& c, uint64_t seed)
    : params(ParamSet<T>::initialised(param_specs(c), seed)),
      grads(ParamSet<T>::zeros(param_specs(c))),
      fp8(fp8_delayed_state(c)),
      cfg_(c) {
  expert_bias.assign(static_cast<size_t>(c.moe_layers()), zeros<T>(c.experts));
}

template <class T> MicroResult Model<T>::forward_backward(const int64_t* inputs, const int64_t* targets, int64_t b) {
  const Fp8StateScope delayed(&fp8);  // fp8-delayed: the scales of the step, the amaxes recorded
  return run(inputs, targets, b, true);
}

template <class T> MicroResult Model<T>::forward(const int64_t* inputs, const int64_t* targets, int64_t b) {
  const Fp8StateScope delayed(&fp8);
  return run(inputs, targets, b, false);
}

template <class T> MicroResult Model<T>::run(const int64_t* inputs, const int64_t* targets, int64_t b, bool backward) {
  const ModelConfig& c = cfg_;
  // The parameters the ops see: the master weights themselves, or their compute copy
  // rounded to the policy's storage format (core/precision.h); gradients go to grads either way.
  if (current_precision().store != Low::none) {
    ParamSet<T>& rounded = compute_copy_;
    if (rounded.size() != params.size()) rounded = ParamSet<T>::zeros(params.specs);
    for (size_t i = 0; i < rounded.size(); ++i) {
      copy_values(rounded.tensors[i].ptr(), params.tensors[i].ptr(), rounded.tensors[i].numel());
      storage_point(rounded.tensors[i].ptr(), rounded.tensors[i].numel());
    }
    for (size_t i = 0; i < rounded.size(); ++i)  // fp8: the linears' weights, E4M3 per tensor (per expert)
      if (const int64_t blocks = fp8_weight_blocks(rounded.specs[i]); blocks > 0)
        fp8_tensors(rounded.tensors[i].ptr(), blocks, rounded.tensors[i].numel() / blocks, nullptr,
                    rounded.specs[i].name);
  }
  ParamSet<T>& P = current_precision().store != Low::none ? compute_copy_ : params;
  const int64_t D = c.dim, V = c.vocab, n = b * c.seq;
  MicroResult res;
  auto h = zeros<T>(n * D);  // (n, D) residual stream
  embedding_forward(inputs, n, P["embed.weight"].ptr(), V, D, h.data());
  trace::micro(route_first_token / c.seq, b);  // the baseline: one rank, every position and column
  trace::record(trace::Site::embed, -1, trace::Dir::fwd, h.data(), n, D);
  std::vector<RefLayerCache<T>> caches(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    const T* bias = c.is_moe(l) ? expert_bias[static_cast<size_t>(l - c.dense_layers)].data() : nullptr;
    auto& L = caches[static_cast<size_t>(l)];
    const RouteFollow follow{route_oracle, l - c.dense_layers, route_first_token};
    layer_forward(c, layer_refs(P, c, l), bias, n, h.data(), L, follow, l);
    if (!c.is_moe(l)) continue;
    res.aux += L.moe.aux;
    res.chosen.push_back(L.moe.chosen);
    res.tokens_per_expert.push_back(L.moe.perm.counts);
    std::vector<double> sel(L.moe.s.size());  // (n, E), the values topk_select compared
    for (size_t i = 0; i < sel.size(); ++i)
      sel[i] = static_cast<double>(L.moe.s[i] + bias[i % static_cast<size_t>(c.experts)]);
    res.select_scores.push_back(std::move(sel));
  }
  // head: logits (n, V) = LN(h) · W, W (D, V) = lm_head or embed^T
  auto hf = zeros<T>(n * D), mf = zeros<T>(n), rf = zeros<T>(n);
  const bool ln_bias = c.norm == NormKind::layernorm;  // RMSNorm has no bias
  norm_forward(c.norm, h.data(), P["final_ln.weight"].ptr(), ln_bias ? P["final_ln.bias"].ptr() : nullptr, n, D,
               hf.data(), mf.data(), rf.data());
  trace::record(trace::Site::final_ln, c.layers, trace::Dir::fwd, hf.data(), n, D);
  Buffer<T> head_t;
  const T* head = nullptr;
  if (c.tie_embeddings) {
    head_t = transpose(P["embed.weight"].ptr(), V, D);
    head = head_t.data();
  } else {
    head = P["lm_head.weight"].ptr();
  }
  auto logits = zeros<T>(n * V), losses = zeros<T>(n);
  matmul_forward(hf.data(), head, logits.data(), n, D, V);
  storage_point(logits.data(), n * V);  // a storage point; cross-entropy runs in the compute dtype
  res.logit_peak = max_abs(logits.data(), n * V);  // on the device in a cuda run (ops/elementwise.h)
  trace::record(trace::Site::logits, c.layers, trace::Dir::fwd, logits.data(), n, V);
  const double inv_tokens = 1.0 / static_cast<double>(c.batch * c.seq);
  res.ce = static_cast<double>(cross_entropy_forward(logits.data(), targets, n, V, losses.data())) * inv_tokens;
  res.loss = res.ce + res.aux;
  if (!backward) return res;

  auto dlogits = zeros<T>(n * V);
  // the loss's gradient scaled (fp16: optim/loss_scaler.h), stored in fp16 (a backward storage point)
  cross_entropy_backward(logits.data(), targets, n, V, static_cast<T>(inv_tokens * current_loss_scale()),
                         dlogits.data());
  jitter_loss_gradient(dlogits.data(), n * V);  // the rounding twin's only (core/precision.h)
  grad_storage_point(dlogits.data(), n * V);
  const double seed = inv_tokens * current_loss_scale();
  res.logit_grad_sq = sum_sq_over(dlogits.data(), n * V, seed);
  trace::record(trace::Site::logits, c.layers, trace::Dir::bwd, dlogits.data(), n, V);
  auto dhf = zeros<T>(n * D);
  if (c.tie_embeddings) {
    auto dhead = zeros<T>(D * V);
    matmul_backward(hf.data(), head, dlogits.data(), dhf.data(), dhead.data(), n, D, V);
    auto dhead_t = transpose(dhead.data(), D, V);  // (V, D)
    add_into(grads["embed.weight"].ptr(), dhead_t.data(), V * D);
  } else {
    matmul_backward(hf.data(), head, dlogits.data(), dhf.data(), grads["lm_head.weight"].ptr(), n, D, V);
  }
  trace::record(trace::Site::final_ln, c.layers, trace::Dir::bwd, dhf.data(), n, D);
  auto dh = zeros<T>(n * D);
  norm_backward(c.norm, h.data(), P["final_ln.weight"].ptr(), mf.data(), rf.data(), dhf.data(), n, D, dh.data(),
                grads["final_ln.weight"].ptr(), ln_bias ? grads["final_ln.bias"].ptr() : nullptr);
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    const T* bias = c.is_moe(l) ? expert_bias[static_cast<size_t>(l - c.dense_layers)].data() : nullptr;
    layer_backward(c, layer_refs(P, c, l), layer_refs(grads, c, l), bias, n, caches[static_cast<size_t>(l)],
                   dh.data(), l);
  }
  trace::record(trace::Site::embed, -1, trace::Dir::bwd, dh.data(), n, D);
  embedding_backward(inputs, n, dh.data(), V, D, grads["embed.weight"].ptr());
  return res;
}

template class Model<float>;
template class Model<double>;

}  // namespace parity
