#include "parallel/pmoe.h"

#include "ops/aux_loss.h"
#include "ops/matmul.h"
#include "ops/router.h"

namespace parity {

namespace {

template <class T> std::vector<T> zeros(int64_t n) { return std::vector<T>(static_cast<size_t>(n), T(0)); }

template <class T> void add_into(std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
}

// Routing of this lane's tokens, then of every token of the micro-batch.
template <class T>
void route(const ModelConfig& c, const TpContext& tp, const PMoeWeights<T>& wt, const std::vector<T>& x_res, int64_t b,
           PMoeCache<T>& k) {
  const int64_t D = c.dim, E = c.experts, K = c.top_k, S = c.seq;
  const auto n_res = static_cast<int64_t>(x_res.size()) / D;
  k.logits = zeros<T>(n_res * E), k.s = zeros<T>(n_res * E), k.w = zeros<T>(n_res * K);
  matmul_forward(x_res.data(), wt.gate, k.logits.data(), n_res, D, E);
  router_scores_forward(k.logits.data(), n_res, E, c.score, k.s.data());
  k.chosen.assign(static_cast<size_t>(n_res * K), 0);
  topk_select(k.s.data(), wt.bias, n_res, E, K, k.chosen.data());
  route_weights_forward(k.s.data(), k.chosen.data(), n_res, E, K, c.route_norm, c.route_scale, k.w.data());
  k.s_full = tp_to_full(tp, k.s, b, S, E);
  k.w_full = tp_to_full(tp, k.w, b, S, K);
  k.chosen_full = tp_to_full(tp, k.chosen, b, S, K);
}

}  // namespace

template <class T>
void pmoe_forward(const ModelConfig& c, const TpContext& tp, const PMoeWeights<T>& wt, const std::vector<T>& x_res,
                  int64_t b, std::vector<T>& out_res, PMoeCache<T>& k) {
  const int64_t D = c.dim, E = c.experts, K = c.top_k, S = c.seq, n = b * S, F = wt.Fl;
  route(c, tp, wt, x_res, b, k);
  k.x_full = tp_to_full(tp, x_res, b, S, D);
  k.perm = make_permutation(k.chosen_full.data(), n, E, K);
  k.xg = zeros<T>(n * K * D), k.yg = zeros<T>(n * K * D), k.y = zeros<T>(n * K * D);
  permute_forward(k.x_full.data(), D, k.perm, k.xg.data());
  k.experts.assign(static_cast<size_t>(E), {});
  for (int64_t e = 0, row = 0; e < E; row += k.perm.counts[static_cast<size_t>(e)], ++e)
    ffn_forward(k.xg.data() + row * D, k.perm.counts[static_cast<size_t>(e)], D, F, wt.w1 + e * D * F,
                wt.w3 + e * D * F, wt.w2 + e * F * D, k.yg.data() + row * D, k.experts[static_cast<size_t>(e)]);
  unpermute_forward(k.yg.data(), D, k.perm, k.y.data());
  auto part = zeros<T>(n * D);  // (n, D) this lane's partial output
  combine_forward(k.y.data(), k.w_full.data(), n, K, D, part.data());
  if (c.shared_experts > 0) {
    auto sh = zeros<T>(n * D);
    ffn_forward(k.x_full.data(), n, D, wt.Fsl, wt.sw1, wt.sw3, wt.sw2, sh.data(), k.shared);
    add_into(part, sh);
  }
  out_res = tp_sum_to_res(tp, std::move(part), b, S, D);
  k.aux = 0;
  if (c.aux_alpha > 0)
    for (int64_t q = 0; q < b; ++q)
      k.aux += c.aux_alpha / static_cast<double>(c.batch) *
               static_cast<double>(aux_loss_forward(k.s_full.data() + q * S * E, k.chosen_full.data() + q * S * K, S, E, K));
}

template <class T>
void pmoe_backward(const ModelConfig& c, const TpContext& tp, const PMoeWeights<T>& wt, const std::vector<T>& x_res,
                   int64_t b, const PMoeCache<T>& k, const std::vector<T>& dout_res, std::vector<T>& dx_res,
                   const PMoeGrads<T>& g) {
  const int64_t D = c.dim, E = c.experts, K = c.top_k, S = c.seq, n = b * S, F = wt.Fl;
  const auto n_res = static_cast<int64_t>(x_res.size()) / D;
  std::vector<T> dout = tp_to_full(tp, dout_res, b, S, D);  // (n, D)
  auto dy = zeros<T>(n * K * D), dw_part = zeros<T>(n * K);
  combine_backward(k.y.data(), k.w_full.data(), dout.data(), n, K, D, dy.data(), dw_part.data());
  auto dyg = zeros<T>(n * K * D), dxg = zeros<T>(n * K * D), dx_part = zeros<T>(n * D);
  unpermute_backward(dy.data(), D, k.perm, dyg.data());
  for (int64_t e = 0, row = 0; e < E; row += k.perm.counts[static_cast<size_t>(e)], ++e)
    ffn_backward(k.xg.data() + row * D, k.perm.counts[static_cast<size_t>(e)], D, F, wt.w1 + e * D * F,
                 wt.w3 + e * D * F, wt.w2 + e * F * D, k.experts[static_cast<size_t>(e)], dyg.data() + row * D,
                 dxg.data() + row * D, g.w1 + e * D * F, g.w3 + e * D * F, g.w2 + e * F * D);
  permute_backward(dxg.data(), D, k.perm, dx_part.data());
  if (c.shared_experts > 0)
    ffn_backward(k.x_full.data(), n, D, wt.Fsl, wt.sw1, wt.sw3, wt.sw2, k.shared, dout.data(), dx_part.data(), g.sw1,
                 g.sw3, g.sw2);
  add_into(dx_res, tp_sum_to_res(tp, std::move(dx_part), b, S, D));
  // The routing weights' gradient: each lane saw only its hidden chunk, so sum the lanes'
  // parts, into this lane's tokens (the backward of routing on every token).
  std::vector<T> dw = tp_sum_to_res(tp, std::move(dw_part), b, S, K);  // (n_res, K)
  auto ds = zeros<T>(n_res * E);
  route_weights_backward(k.s.data(), k.chosen.data(), n_res, E, K, c.route_norm, c.route_scale, dw.data(), ds.data());
  if (c.aux_alpha > 0) {
    auto ds_full = zeros<T>(n * E);  // identical on every lane; keep this lane's tokens
    const T coef = static_cast<T>(c.aux_alpha / static_cast<double>(c.batch));
    for (int64_t q = 0; q < b; ++q)
      aux_loss_backward(k.s_full.data() + q * S * E, k.chosen_full.data() + q * S * K, S, E, K, coef,
                        ds_full.data() + q * S * E);
    add_into(ds, tp.sp && tp.size > 1 ? sp_slice(tp, ds_full, b, S, E) : ds_full);
  }
  auto dlogits = zeros<T>(n_res * E);
  router_scores_backward(k.s.data(), ds.data(), n_res, E, c.score, dlogits.data());
  matmul_backward(x_res.data(), wt.gate, dlogits.data(), dx_res.data(), g.gate, n_res, D, E);
}

#define PARITY_INSTANTIATE(T)                                                                                    \
  template void pmoe_forward<T>(const ModelConfig&, const TpContext&, const PMoeWeights<T>&, const std::vector<T>&, \
                                int64_t, std::vector<T>&, PMoeCache<T>&);                                        \
  template void pmoe_backward<T>(const ModelConfig&, const TpContext&, const PMoeWeights<T>&,                    \
                                 const std::vector<T>&, int64_t, const PMoeCache<T>&, const std::vector<T>&,     \
                                 std::vector<T>&, const PMoeGrads<T>&);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
