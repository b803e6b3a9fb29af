// GPU twins of src/ops/aux_loss.cpp, as a few small kernels in the CPU's orders:
//   check_rows      one thread per token: flags an expert id outside [0, E) (the CPU throws).
//   fractions       one thread per expert e: counts e in chosen (an integer count, so the
//                   scan order does not matter), f[e] = coef * T(count), coef = T(E) / (T(K) * T(S)).
// forward:
//   token_sums      one thread per token t: Z[t] = sum_e s[t][e] (e order).
//   expert_psums    one thread per expert e: psum[e] = sum_t s[t][e] / Z[t] (t order).
//   loss_sum        one thread: loss = sum_e f[e] * (psum[e] / T(S)) (e order).
// backward:
//   backward_rows   one thread per token, the CPU's row loop: Z, fs, then ds[t][j] +=.
// No exp/log: results match the CPU bitwise.
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

constexpr const char* kWhat = "aux_loss: chosen";

// True when a kernel set the flag (read after finish()).
bool flagged(const int* bad) {
  int flag = 0;
  check(cudaMemcpy(&flag, bad, sizeof(int), cudaMemcpyDeviceToHost), "aux_loss: read error flag");
  return flag != 0;
}

// Throws the CPU's message (check_index's) for the first id of chosen (count entries, any
// kind of memory) outside [0, E); called only when there is one.
[[noreturn]] void throw_first_bad(const int64_t* chosen, int64_t count, int64_t E) {
  std::vector<int64_t> h(static_cast<size_t>(count));
  check(cudaMemcpy(h.data(), chosen, count * sizeof(int64_t), cudaMemcpyDefault), kWhat);
  for (int64_t c : h) ops_detail::check_index(c, E, kWhat);
  throw Error(std::string(kWhat) + ": invalid expert id");  // not reached
}

// *bad = 1 if a row of chosen (S, K) holds an id outside [0, E).
__global__ void check_rows(const int64_t* chosen, int64_t S, int64_t E, int64_t K, int* bad) {
  const int64_t t = thread_index();
  if (t >= S) return;
  for (int64_t k = 0; k < K; ++k)
    if (chosen[t * K + k] < 0 || chosen[t * K + k] >= E) *bad = 1;
}

// f[e] = coef * T(#{a : chosen[a] == e});  chosen (S*K), f (E).
template <class T>
__global__ void fractions(const int64_t* chosen, int64_t S, int64_t E, int64_t K, T coef, T* f) {
  const int64_t e = thread_index();
  if (e >= E) return;
  int64_t count = 0;
  for (int64_t a = 0; a < S * K; ++a) count += chosen[a] == e ? 1 : 0;
  f[e] = coef * T(count);
}

// Z[t] = sum_e s[t][e] in e order;  s (S, E), Z (S).
template <class T> __global__ void token_sums(const T* s, int64_t S, int64_t E, T* Z) {
  const int64_t t = thread_index();
  if (t >= S) return;
  const T* sr = s + t * E;  // (E)
  T z = T(0);
  for (int64_t e = 0; e < E; ++e) z += sr[e];
  Z[t] = z;
}

// psum[e] = sum_t s[t][e] / Z[t] in t order;  s (S, E), Z (S), psum (E).
template <class T> __global__ void expert_psums(const T* s, const T* Z, int64_t S, int64_t E, T* psum) {
  const int64_t e = thread_index();
  if (e >= E) return;
  T p = T(0);
  for (int64_t t = 0; t < S; ++t) p += s[t * E + e] / Z[t];
  psum[e] = p;
}

// loss = sum_e f[e] * (psum[e] / T(S)) in e order;  f, psum (E), loss (1).
template <class T> __global__ void loss_sum(const T* f, const T* psum, int64_t S, int64_t E, T* loss) {
  T l = T(0);
  for (int64_t e = 0; e < E; ++e) l += f[e] * (psum[e] / T(S));
  *loss = l;
}

// ds[t][j] += dloss * ((f[j] - fs) / (Z * T(S))), Z = sum_e s[t][e], fs = sum_e f[e] * (s[t][e] / Z),
// both in e order. Does nothing once an id was flagged (the CPU throws before touching ds).
// s (S, E), f (E), ds (S, E).
template <class T>
__global__ void backward_rows(const T* s, const T* f, int64_t S, int64_t E, T dloss, const int* bad, T* ds) {
  const int64_t t = thread_index();
  if (t >= S || *bad != 0) return;
  const T* sr = s + t * E;  // (E)
  T* dsr = ds + t * E;      // (E)
  T Z = T(0);
  for (int64_t e = 0; e < E; ++e) Z += sr[e];
  T fs = T(0);
  for (int64_t e = 0; e < E; ++e) fs += f[e] * (sr[e] / Z);
  const T denom = Z * T(S);
  for (int64_t j = 0; j < E; ++j) dsr[j] += dloss * ((f[j] - fs) / denom);
}

}  // namespace

template <class T> T aux_loss_forward(const T* s, const int64_t* chosen, int64_t S, int64_t E, int64_t K) {
  if (S == 0 || K == 0) return T(0);
  if (E == 0) throw_first_bad(chosen, S * K, E);  // every id is out of range
  const T coef = T(E) / (T(K) * T(S));
  T loss = T(0);
  {
    Stage st;
    const T* ds = st.in(s, S * E);
    const int64_t* dc = st.in(chosen, S * K);
    int* bad = st.scratch<int>(1);
    T* f = st.scratch<T>(E);     // (E)
    T* Z = st.scratch<T>(S);     // (S)
    T* psum = st.scratch<T>(E);  // (E)
    T* dloss = st.scratch<T>(1);
    check_rows<<<blocks_for(S), kThreads, 0, stream()>>>(dc, S, E, K, bad);
    st.launched("aux_loss_forward (check)");
    fractions<<<blocks_for(E), kThreads, 0, stream()>>>(dc, S, E, K, coef, f);
    st.launched("aux_loss_forward (fractions)");
    token_sums<<<blocks_for(S), kThreads, 0, stream()>>>(ds, S, E, Z);
    st.launched("aux_loss_forward (token sums)");
    expert_psums<<<blocks_for(E), kThreads, 0, stream()>>>(ds, Z, S, E, psum);
    st.launched("aux_loss_forward (expert sums)");
    loss_sum<<<1, 1, 0, stream()>>>(f, psum, S, E, dloss);
    st.launched("aux_loss_forward");
    st.finish();
    if (flagged(bad)) throw_first_bad(chosen, S * K, E);
    check(cudaMemcpy(&loss, dloss, sizeof(T), cudaMemcpyDeviceToHost), "aux_loss_forward: read loss");
  }
  return loss;
}

template <class T>
void aux_loss_backward(const T* s, const int64_t* chosen, int64_t S, int64_t E, int64_t K, T dloss, T* ds) {
  if (S == 0 || K == 0) return;
  if (E == 0) throw_first_bad(chosen, S * K, E);
  const T coef = T(E) / (T(K) * T(S));
  Stage st;
  const T* dsc = st.in(s, S * E);
  const int64_t* dc = st.in(chosen, S * K);
  T* dds = st.out(ds, S * E);
  int* bad = st.scratch<int>(1);
  T* f = st.scratch<T>(E);  // (E)
  check_rows<<<blocks_for(S), kThreads, 0, stream()>>>(dc, S, E, K, bad);
  st.launched("aux_loss_backward (check)");
  fractions<<<blocks_for(E), kThreads, 0, stream()>>>(dc, S, E, K, coef, f);
  st.launched("aux_loss_backward (fractions)");
  backward_rows<<<blocks_for(S), kThreads, 0, stream()>>>(dsc, f, S, E, dloss, bad, dds);
  st.launched("aux_loss_backward");
  st.finish();
  if (flagged(bad)) throw_first_bad(chosen, S * K, E);
}

template float aux_loss_forward<float>(const float*, const int64_t*, int64_t, int64_t, int64_t);
template double aux_loss_forward<double>(const double*, const int64_t*, int64_t, int64_t, int64_t);
template void aux_loss_backward<float>(const float*, const int64_t*, int64_t, int64_t, int64_t, float, float*);
template void aux_loss_backward<double>(const double*, const int64_t*, int64_t, int64_t, int64_t, double,
                                        double*);

}  // namespace parity::cuda
