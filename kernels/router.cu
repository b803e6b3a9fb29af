// GPU twins of src/ops/router.cpp. One thread per row where the CPU works a row at a time
// (softmax forward/backward, topk_select, route weights), one per element for sigmoid.
// Each thread runs the CPU's loops in the CPU's order with the same expressions, so the
// results match the CPU bitwise except where exp is used (softmax and sigmoid forwards).
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"
#include "ops/scalar_math.h"

namespace parity::cuda {

namespace {

// True (and *bad set) when a row of chosen (K) holds an id outside [0, E).
__device__ inline bool bad_row(const int64_t* cr, int64_t K, int64_t E, int* bad) {
  for (int64_t k = 0; k < K; ++k)
    if (cr[k] < 0 || cr[k] >= E) {
      *bad = 1;
      return true;
    }
  return false;
}

// True when a kernel set the flag (read after finish()).
bool flagged(const int* bad) {
  int flag = 0;
  check(cudaMemcpy(&flag, bad, sizeof(int), cudaMemcpyDeviceToHost), "router: read error flag");
  return flag != 0;
}

// Throws the CPU's message (check_index's) for the first id of chosen (count entries, any
// kind of memory) outside [0, E); called only when there is one.
[[noreturn]] void throw_first_bad(const int64_t* chosen, int64_t count, int64_t E, const char* what) {
  std::vector<int64_t> h(static_cast<size_t>(count));
  check(cudaMemcpy(h.data(), chosen, count * sizeof(int64_t), cudaMemcpyDefault), what);
  for (int64_t c : h) ops_detail::check_index(c, E, what);
  throw Error(std::string(what) + ": invalid expert id");  // not reached
}

// softmax of each row: max in e order, exp and sum in e order, then divide.
// logits (n, E), s (n, E); E > 0.
template <class T> __global__ void softmax_rows(const T* logits, int64_t n, int64_t E, T* s) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const T* lr = logits + i * E;  // (E)
  T* sr = s + i * E;             // (E)
  T mx = lr[0];
  for (int64_t e = 1; e < E; ++e) mx = lr[e] > mx ? lr[e] : mx;
  T sum = T(0);
  for (int64_t e = 0; e < E; ++e) {
    sr[e] = dev_exp(lr[e] - mx);
    sum += sr[e];
  }
  for (int64_t e = 0; e < E; ++e) sr[e] = sr[e] / sum;
}

// s[i] = stable_sigmoid(logits[i]); logits, s (count).
template <class T> __global__ void sigmoid_elems(const T* logits, int64_t count, T* s) {
  const int64_t i = thread_index();
  if (i < count) s[i] = stable_sigmoid(logits[i]);
}

// dl[e] += s[e] * (ds[e] - dot), dot = sum_f ds[f] * s[f] in f order. s, ds, dl (n, E).
template <class T> __global__ void softmax_back_rows(const T* s, const T* ds, int64_t n, int64_t E, T* dl) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const T* sr = s + i * E;    // (E)
  const T* dsr = ds + i * E;  // (E)
  T* dlr = dl + i * E;        // (E)
  T dot = T(0);
  for (int64_t e = 0; e < E; ++e) dot += dsr[e] * sr[e];
  for (int64_t e = 0; e < E; ++e) dlr[e] += sr[e] * (dsr[e] - dot);
}

// dl[i] += ds[i] * (s[i] * (1 - s[i])); s, ds, dl (count).
template <class T> __global__ void sigmoid_back_elems(const T* s, const T* ds, int64_t count, T* dl) {
  const int64_t i = thread_index();
  if (i < count) dl[i] += ds[i] * (s[i] * (T(1) - s[i]));
}

// Per row, slot k takes the not-yet-chosen expert with the largest value = s + bias
// (strict '>' scanning e upwards: ties to the lower index). "Taken" = already in the
// row's earlier slots. s (n, E), bias (E) or nullptr, chosen (n, K).
template <class T>
__global__ void topk_rows(const T* s, const T* bias, int64_t n, int64_t E, int64_t K, int64_t* chosen) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const T* sr = s + i * E;       // (E)
  int64_t* cr = chosen + i * K;  // (K)
  for (int64_t k = 0; k < K; ++k) {
    int64_t best = -1;
    T best_v = T(0);
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t j = 0; j < k && !taken; ++j) taken = cr[j] == e;
      if (taken) continue;
      const T v = bias != nullptr ? sr[e] + bias[e] : sr[e];
      if (best < 0 || v > best_v) {
        best = e;
        best_v = v;
      }
    }
    cr[k] = best;
  }
}

// Per row: Z = sum_k s[chosen[k]] (slot order); w[k] = norm ? (u / Z) * sc : u * sc.
// s (n, E), chosen (n, K), w (n, K).
template <class T>
__global__ void route_rows(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm, T sc,
                           T* w, int* bad) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t* cr = chosen + i * K;  // (K)
  const T* sr = s + i * E;             // (E)
  T* wr = w + i * K;                   // (K)
  if (bad_row(cr, K, E, bad)) return;
  T Z = T(0);
  for (int64_t k = 0; k < K; ++k) Z += sr[cr[k]];
  for (int64_t k = 0; k < K; ++k) {
    const T u = sr[cr[k]];
    wr[k] = norm ? (u / Z) * sc : u * sc;
  }
}

// Per row, slots added in slot order. plain: ds[chosen[k]] += sc * dw[k]; norm:
// dot = sum_j dw[j] * (u[j] / Z) (j order), ds[chosen[k]] += (sc / Z) * (dw[k] - dot).
// s (n, E), chosen (n, K), dw (n, K), ds (n, E).
template <class T>
__global__ void route_back_rows(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm,
                                T sc, const T* dw, T* ds, int* bad) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const int64_t* cr = chosen + i * K;  // (K)
  const T* sr = s + i * E;             // (E)
  const T* dwr = dw + i * K;           // (K)
  T* dsr = ds + i * E;                 // (E)
  if (bad_row(cr, K, E, bad)) return;
  if (!norm) {
    for (int64_t k = 0; k < K; ++k) dsr[cr[k]] += sc * dwr[k];
    return;
  }
  T Z = T(0);
  for (int64_t k = 0; k < K; ++k) Z += sr[cr[k]];
  T dot = T(0);
  for (int64_t j = 0; j < K; ++j) dot += dwr[j] * (sr[cr[j]] / Z);
  const T g = sc / Z;
  for (int64_t k = 0; k < K; ++k) dsr[cr[k]] += g * (dwr[k] - dot);
}

}  // namespace

template <class T> void router_scores_forward(const T* logits, int64_t n, int64_t E, int score, T* s) {
  if (n * E == 0) return;
  Stage st;
  const T* dl = st.in(logits, n * E);
  T* dsc = st.out(s, n * E);
  if (score == 1)
    sigmoid_elems<<<blocks_for(n * E), kThreads, 0, stream()>>>(dl, n * E, dsc);
  else
    softmax_rows<<<blocks_for(n), kThreads, 0, stream()>>>(dl, n, E, dsc);
  st.launched("router_scores_forward");
  st.finish();
}

template <class T> void router_scores_backward(const T* s, const T* ds, int64_t n, int64_t E, int score, T* dlogits) {
  if (n * E == 0) return;
  Stage st;
  const T* dsc = st.in(s, n * E);
  const T* dds = st.in(ds, n * E);
  T* ddl = st.out(dlogits, n * E);
  if (score == 1)
    sigmoid_back_elems<<<blocks_for(n * E), kThreads, 0, stream()>>>(dsc, dds, n * E, ddl);
  else
    softmax_back_rows<<<blocks_for(n), kThreads, 0, stream()>>>(dsc, dds, n, E, ddl);
  st.launched("router_scores_backward");
  st.finish();
}

template <class T> void topk_select(const T* s, const T* bias, int64_t n, int64_t E, int64_t K, int64_t* chosen) {
  if (K < 0 || K > E)
    throw Error("topk_select: K = " + std::to_string(K) + " must be in [0, E = " + std::to_string(E) + "]");
  if (n == 0 || K == 0) return;  // K > 0 here implies E > 0
  Stage st;
  const T* dsc = st.in(s, n * E);
  const T* db = st.in(bias, E);
  int64_t* dc = st.out(chosen, n * K);
  topk_rows<<<blocks_for(n), kThreads, 0, stream()>>>(dsc, db, n, E, K, dc);
  st.launched("topk_select");
  st.finish();
}

template <class T>
void route_weights_forward(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm,
                           double scale, T* w) {
  const char* what = "route_weights_forward: chosen";
  if (n == 0 || K == 0) return;
  if (E == 0) throw_first_bad(chosen, n * K, E, what);  // every id is out of range
  Stage st;
  const T* dsc = st.in(s, n * E);
  const int64_t* dc = st.in(chosen, n * K);
  T* dw = st.out(w, n * K);
  int* bad = st.scratch<int>(1);
  route_rows<<<blocks_for(n), kThreads, 0, stream()>>>(dsc, dc, n, E, K, norm, T(scale), dw, bad);
  st.launched("route_weights_forward");
  st.finish();
  if (flagged(bad)) throw_first_bad(chosen, n * K, E, what);
}

template <class T>
void route_weights_backward(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm,
                            double scale, const T* dw, T* ds) {
  const char* what = "route_weights_backward: chosen";
  if (n == 0 || K == 0) return;
  if (E == 0) throw_first_bad(chosen, n * K, E, what);
  Stage st;
  const T* dsc = st.in(s, n * E);
  const int64_t* dc = st.in(chosen, n * K);
  const T* ddw = st.in(dw, n * K);
  T* dds = st.out(ds, n * E);
  int* bad = st.scratch<int>(1);
  route_back_rows<<<blocks_for(n), kThreads, 0, stream()>>>(dsc, dc, n, E, K, norm, T(scale), ddw, dds, bad);
  st.launched("route_weights_backward");
  st.finish();
  if (flagged(bad)) throw_first_bad(chosen, n * K, E, what);
}

#define PARITY_INSTANTIATE(T)                                                                                \
  template void router_scores_forward<T>(const T*, int64_t, int64_t, int, T*);                               \
  template void router_scores_backward<T>(const T*, const T*, int64_t, int64_t, int, T*);                    \
  template void topk_select<T>(const T*, const T*, int64_t, int64_t, int64_t, int64_t*);                     \
  template void route_weights_forward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, bool, double, \
                                         T*);                                                                \
  template void route_weights_backward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, bool, double, \
                                          const T*, T*);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity::cuda
