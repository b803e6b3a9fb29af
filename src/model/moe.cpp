#include "model/moe.h"

#include "core/fp8_delayed.h"
#include "ops/elementwise.h"

#include "ops/aux_loss.h"
#include "ops/matmul.h"
#include "ops/router.h"
#include "model/trace.h"

namespace parity {

namespace {

// Runs every routed expert on its rows of the grouped buffer.
template <class T>
void experts_forward(const ModelConfig& c, const MoeWeights<T>& wt, MoeCache<T>& cache) {
  const int64_t D = c.dim, F = c.expert_hidden;
  cache.experts.assign(static_cast<size_t>(c.experts), {});
  int64_t row = 0;
  const Fp8SiteScope module(wt.follow.layer + c.dense_layers, "moe.experts");  // fp8-delayed: per expert
  for (int64_t e = 0; e < c.experts; ++e) {
    const int64_t cnt = cache.perm.counts[static_cast<size_t>(e)];
    const Fp8SiteScope expert(e);
    ffn_forward(cache.xg.data() + row * D, cnt, D, F, wt.w1 + e * D * F, wt.w3 + e * D * F, wt.w2 + e * F * D,
                cache.yg.data() + row * D, cache.experts[static_cast<size_t>(e)]);
    row += cnt;
  }
}

template <class T>
void experts_backward(const ModelConfig& c, const MoeWeights<T>& wt, const MoeCache<T>& cache, const T* dyg, T* dxg,
                      const MoeGrads<T>& g) {
  const int64_t D = c.dim, F = c.expert_hidden;
  int64_t row = 0;
  const Fp8SiteScope module(wt.follow.layer + c.dense_layers, "moe.experts");  // fp8-delayed: per expert
  for (int64_t e = 0; e < c.experts; ++e) {
    const int64_t cnt = cache.perm.counts[static_cast<size_t>(e)];
    const Fp8SiteScope expert(e);
    ffn_backward(cache.xg.data() + row * D, cnt, D, F, wt.w1 + e * D * F, wt.w3 + e * D * F, wt.w2 + e * F * D,
                 cache.experts[static_cast<size_t>(e)], dyg + row * D, dxg + row * D, g.w1 + e * D * F,
                 g.w3 + e * D * F, g.w2 + e * F * D);
    row += cnt;
  }
}

}  // namespace

template <class T>
void moe_forward(const ModelConfig& c, const MoeWeights<T>& wt, const T* x, int64_t n, T* out, MoeCache<T>& cache) {
  const int64_t D = c.dim, E = c.experts, K = c.top_k, S = c.seq, l = wt.follow.layer + c.dense_layers;
  using trace::Dir, trace::Site;
  cache.logits = zeros<T>(n * E);
  cache.s = zeros<T>(n * E);
  matmul_forward(x, wt.gate, cache.logits.data(), n, D, E);
  storage_point(cache.logits.data(), n * E);  // a storage point (core/precision.h); scores in the compute dtype
  trace::record(Site::router, l, Dir::fwd, cache.logits.data(), n, E);
  router_scores_forward(cache.logits.data(), n, E, c.score, cache.s.data());
  trace::record(Site::scores, l, Dir::fwd, cache.s.data(), n, E);
  cache.chosen.assign(static_cast<size_t>(n * K), 0);
  topk_select(cache.s.data(), wt.expert_bias, n, E, K, cache.chosen.data());
  cache.followed = follow_baseline_routes(wt.follow, nullptr, n, K, E, cache.chosen.data());
  cache.w = zeros<T>(n * K);
  route_weights_forward(cache.s.data(), cache.chosen.data(), n, E, K, c.route_norm, c.route_scale, cache.w.data());
  trace::record(Site::route_w, l, Dir::fwd, cache.w.data(), n, K);

  cache.perm = make_permutation(cache.chosen.data(), n, E, K);
  cache.xg = zeros<T>(n * K * D);
  cache.yg = zeros<T>(n * K * D);
  permute_forward(x, D, cache.perm, cache.xg.data());
  experts_forward(c, wt, cache);
  cache.y = zeros<T>(n * K * D);
  unpermute_forward(cache.yg.data(), D, cache.perm, cache.y.data());
  trace::record(Site::experts, l, Dir::fwd, cache.y.data(), n, K * D);
  zero_values(out, n * D);
  combine_forward(cache.y.data(), cache.w.data(), n, K, D, out);
  trace::record(Site::combine, l, Dir::fwd, out, n, D);

  if (c.shared_experts > 0) {
    cache.shared_out = zeros<T>(n * D);
    const Fp8SiteScope site(l, "moe.shared");  // fp8-delayed: the shared experts' slots
    ffn_forward(x, n, D, c.shared_hidden, wt.shared_w1, wt.shared_w3, wt.shared_w2, cache.shared_out.data(),
                cache.shared);
    trace::record(Site::shared, l, Dir::fwd, cache.shared_out.data(), n, D);
    add_into(out, cache.shared_out.data(), n * D);
  }

  cache.aux = 0;
  if (c.aux_alpha > 0) {
    const double coef = c.aux_alpha / static_cast<double>(c.batch);
    for (int64_t q = 0; q < n / S; ++q)
      cache.aux += coef * static_cast<double>(
                              aux_loss_forward(cache.s.data() + q * S * E, cache.chosen.data() + q * S * K, S, E, K));
  }
}

template <class T>
void moe_backward(const ModelConfig& c, const MoeWeights<T>& wt, const T* x, int64_t n, const MoeCache<T>& cache,
                  const T* dout, T* dx, const MoeGrads<T>& g) {
  const int64_t D = c.dim, E = c.experts, K = c.top_k, S = c.seq, l = wt.follow.layer + c.dense_layers;
  using trace::Dir, trace::Site;
  auto dy = zeros<T>(n * K * D);
  auto dw = zeros<T>(n * K);
  combine_backward(cache.y.data(), cache.w.data(), dout, n, K, D, dy.data(), dw.data());
  trace::record(Site::experts, l, Dir::bwd, dy.data(), n, K * D);
  trace::record(Site::route_w, l, Dir::bwd, dw.data(), n, K);
  auto dyg = zeros<T>(n * K * D);
  unpermute_backward(dy.data(), D, cache.perm, dyg.data());
  auto dxg = zeros<T>(n * K * D);
  experts_backward(c, wt, cache, dyg.data(), dxg.data(), g);
  permute_backward(dxg.data(), D, cache.perm, dx);

  auto ds = zeros<T>(n * E);
  route_weights_backward(cache.s.data(), cache.chosen.data(), n, E, K, c.route_norm, c.route_scale, dw.data(),
                         ds.data());
  if (c.aux_alpha > 0) {
    const T coef = static_cast<T>(c.aux_alpha / static_cast<double>(c.batch) * current_loss_scale());
    for (int64_t q = 0; q < n / S; ++q)
      aux_loss_backward(cache.s.data() + q * S * E, cache.chosen.data() + q * S * K, S, E, K, coef,
                        ds.data() + q * S * E);
  }
  trace::record(Site::scores, l, Dir::bwd, ds.data(), n, E);
  auto dlogits = zeros<T>(n * E);
  router_scores_backward(cache.s.data(), ds.data(), n, E, c.score, dlogits.data());
  trace::record(Site::router, l, Dir::bwd, dlogits.data(), n, E);
  matmul_backward(x, wt.gate, dlogits.data(), dx, g.gate, n, D, E);

  if (c.shared_experts > 0) {
    const Fp8SiteScope site(l, "moe.shared");  // fp8-delayed: the shared experts' slots
    ffn_backward(x, n, D, c.shared_hidden, wt.shared_w1, wt.shared_w3, wt.shared_w2, cache.shared, dout, dx,
                 g.shared_w1, g.shared_w3, g.shared_w2);
  }
}

#define PARITY_INSTANTIATE(T)                                                                               \
  template void moe_forward<T>(const ModelConfig&, const MoeWeights<T>&, const T*, int64_t, T*, MoeCache<T>&); \
  template void moe_backward<T>(const ModelConfig&, const MoeWeights<T>&, const T*, int64_t, const MoeCache<T>&, \
                                const T*, T*, const MoeGrads<T>&);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
