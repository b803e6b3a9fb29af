#include "ops/router.h"

#include "core/device.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/scalar_math.h"

namespace parity {

// softmax: s[i][e] = exp(l[i][e] - max_e l[i]) / sum_e exp(...)   (sum in e order)
// sigmoid: s[i][e] = stable_sigmoid(l[i][e]).  logits (n, E), s (n, E).
template <class T>
void router_scores_forward(const T* logits, int64_t n, int64_t E, Score score, T* s) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::router_scores_forward(logits, n, E, score == Score::sigmoid ? 1 : 0, s);
#endif
  for (int64_t i = 0; i < n; ++i) {
    const T* lr = logits + i * E;  // (E)
    T* sr = s + i * E;             // (E)
    if (score == Score::sigmoid) {
      for (int64_t e = 0; e < E; ++e) sr[e] = ops_detail::stable_sigmoid(lr[e]);
      continue;
    }
    if (E == 0) continue;
    T mx = lr[0];
    for (int64_t e = 1; e < E; ++e) mx = lr[e] > mx ? lr[e] : mx;
    T sum = T(0);
    for (int64_t e = 0; e < E; ++e) {
      sr[e] = std::exp(lr[e] - mx);
      sum += sr[e];
    }
    for (int64_t e = 0; e < E; ++e) sr[e] = sr[e] / sum;
  }
}

// softmax: dl[e] += s[e] * (ds[e] - sum_f ds[f] * s[f])   (sum in f order)
// sigmoid: dl[e] += ds[e] * (s[e] * (1 - s[e])).  s, ds, dlogits (n, E).
template <class T>
void router_scores_backward(const T* s, const T* ds, int64_t n, int64_t E, Score score, T* dlogits) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::router_scores_backward(s, ds, n, E, score == Score::sigmoid ? 1 : 0, dlogits);
#endif
  for (int64_t i = 0; i < n; ++i) {
    const T* sr = s + i * E;     // (E)
    const T* dsr = ds + i * E;   // (E)
    T* dlr = dlogits + i * E;    // (E)
    if (score == Score::sigmoid) {
      for (int64_t e = 0; e < E; ++e) dlr[e] += dsr[e] * (sr[e] * (T(1) - sr[e]));
      continue;
    }
    T dot = T(0);
    for (int64_t e = 0; e < E; ++e) dot += dsr[e] * sr[e];
    for (int64_t e = 0; e < E; ++e) dlr[e] += sr[e] * (dsr[e] - dot);
  }
}

// Per row: value[e] = s[e] + bias[e] (or s[e] when bias is nullptr). Slot k takes the
// not-yet-chosen expert with the largest value; among equal values the lowest index wins
// (strict '>' while scanning e upwards). So chosen is in descending value order and ties
// go to the lower expert index. Requires 0 <= K <= E. s (n, E), bias (E), chosen (n, K).
template <class T>
void topk_select(const T* s, const T* bias, int64_t n, int64_t E, int64_t K, int64_t* chosen) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::topk_select(s, bias, n, E, K, chosen);
#endif
  if (K < 0 || K > E)
    throw Error("topk_select: K = " + std::to_string(K) + " must be in [0, E = " + std::to_string(E) + "]");
  std::vector<T> value(static_cast<size_t>(E));      // (E)
  std::vector<char> taken(static_cast<size_t>(E));   // (E)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = 0; e < E; ++e) {
      value[e] = bias != nullptr ? s[i * E + e] + bias[e] : s[i * E + e];
      taken[e] = 0;
    }
    for (int64_t k = 0; k < K; ++k) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (taken[e]) continue;
        if (best < 0 || value[e] > value[best]) best = e;
      }
      taken[best] = 1;
      chosen[i * K + k] = best;
    }
  }
}

// u[k] = s[i][chosen[i][k]]; norm: Z = sum_k u[k] (slot order), w[i][k] = (u[k] / Z) * scale;
// otherwise w[i][k] = u[k] * scale (scale cast to T first). No epsilon in Z.
template <class T>
void route_weights_forward(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm,
                           double scale, T* w) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::route_weights_forward(s, chosen, n, E, K, norm, scale, w);
#endif
  const T sc = T(scale);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* cr = chosen + i * K;  // (K)
    T* wr = w + i * K;                   // (K)
    T Z = T(0);
    for (int64_t k = 0; k < K; ++k) {
      ops_detail::check_index(cr[k], E, "route_weights_forward: chosen");
      Z += s[i * E + cr[k]];
    }
    for (int64_t k = 0; k < K; ++k) {
      const T u = s[i * E + cr[k]];
      wr[k] = norm ? (u / Z) * sc : u * sc;
    }
  }
}

// norm:  ds[i][chosen[k]] += (scale / Z) * (dw[k] - sum_j dw[j] * (u[j] / Z))   (j order)
// plain: ds[i][chosen[k]] += scale * dw[k].   Slots are added in slot order.
template <class T>
void route_weights_backward(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm,
                            double scale, const T* dw, T* ds) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::route_weights_backward(s, chosen, n, E, K, norm, scale, dw, ds);
#endif
  const T sc = T(scale);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* cr = chosen + i * K;  // (K)
    const T* dwr = dw + i * K;           // (K)
    T* dsr = ds + i * E;                 // (E)
    for (int64_t k = 0; k < K; ++k) ops_detail::check_index(cr[k], E, "route_weights_backward: chosen");
    if (!norm) {
      for (int64_t k = 0; k < K; ++k) dsr[cr[k]] += sc * dwr[k];
      continue;
    }
    T Z = T(0);
    for (int64_t k = 0; k < K; ++k) Z += s[i * E + cr[k]];
    T dot = T(0);
    for (int64_t j = 0; j < K; ++j) dot += dwr[j] * (s[i * E + cr[j]] / Z);
    const T g = sc / Z;
    for (int64_t k = 0; k < K; ++k) dsr[cr[k]] += g * (dwr[k] - dot);
  }
}

template void router_scores_forward<float>(const float*, int64_t, int64_t, Score, float*);
template void router_scores_forward<double>(const double*, int64_t, int64_t, Score, double*);
template void router_scores_backward<float>(const float*, const float*, int64_t, int64_t, Score, float*);
template void router_scores_backward<double>(const double*, const double*, int64_t, int64_t, Score, double*);
template void topk_select<float>(const float*, const float*, int64_t, int64_t, int64_t, int64_t*);
template void topk_select<double>(const double*, const double*, int64_t, int64_t, int64_t, int64_t*);
template void route_weights_forward<float>(const float*, const int64_t*, int64_t, int64_t, int64_t, bool, double,
                                           float*);
template void route_weights_forward<double>(const double*, const int64_t*, int64_t, int64_t, int64_t, bool,
                                            double, double*);
template void route_weights_backward<float>(const float*, const int64_t*, int64_t, int64_t, int64_t, bool, double,
                                            const float*, float*);
template void route_weights_backward<double>(const double*, const int64_t*, int64_t, int64_t, int64_t, bool,
                                             double, const double*, double*);

}  // namespace parity
