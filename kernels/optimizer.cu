// GPU twins of src/optim/optimizer.cpp:
//   sgd_step / adam_step   one thread per element i, running step_buffer's body for that
//                          element with the same T arithmetic and parenthesisation (only
//                          +, -, *, / and sqrt, all correctly rounded): bitwise the CPU's.
//   sum_of_squares         kernels.h's fixed blocking: one thread per chunk of kSumChunk
//                          elements sums double(x)^2 in index order, then one thread sums
//                          the chunk partials in chunk order. Equal to the CPU's plain loop
//                          for n <= kSumChunk; beyond that the association differs.
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"

namespace parity::cuda {

namespace {

// d = g (+ wd * w); m = first ? d : mu * m + d; w = w - lr * m.  w, g, m (n).
template <class T> __global__ void sgd_elems(T* w, const T* g, T* m, int64_t n, T lr, T wd, T mu, bool first) {
  const int64_t i = thread_index();
  if (i >= n) return;
  T d = g[i];
  if (wd != T(0)) d = d + wd * w[i];
  m[i] = first ? d : mu * m[i] + d;
  w[i] = w[i] - lr * m[i];
}

// adam (L2 decay into g) or adamw (decoupled decay of w), then the moments and the step
// with bias corrections bc1, bc2.  w, g, m, v (n).
template <class T>
__global__ void adam_elems(T* w, const T* g, T* m, T* v, int64_t n, T lr, T wd, T b1, T b2, T eps, T bc1, T bc2,
                           bool decoupled) {
  const int64_t i = thread_index();
  if (i >= n) return;
  T gi = g[i];
  if (decoupled)
    w[i] = w[i] - lr * wd * w[i];
  else if (wd != T(0))
    gi = gi + wd * w[i];
  m[i] = b1 * m[i] + (T(1) - b1) * gi;
  v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
  w[i] = w[i] - lr * (m[i] / bc1) / (dev_sqrt(v[i] / bc2) + eps);
}

// partial[c] = sum over i in [c*kSumChunk, min(n, (c+1)*kSumChunk)) of double(x[i])^2, in i order.
// x (n), partial (chunks).
template <class T> __global__ void chunk_squares(const T* x, int64_t n, int64_t chunks, double* partial) {
  const int64_t c = thread_index();
  if (c >= chunks) return;
  const int64_t end = (c + 1) * kSumChunk < n ? (c + 1) * kSumChunk : n;
  double s = 0;
  for (int64_t i = c * kSumChunk; i < end; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  partial[c] = s;
}

// partial[c] = max |x[i]| over chunk c (a NaN passed over), and the chunks' max.
template <class T> __global__ void chunk_max_abs(const T* x, int64_t n, int64_t chunks, double* partial) {
  const int64_t c = thread_index();
  if (c >= chunks) return;
  const int64_t end = (c + 1) * kSumChunk < n ? (c + 1) * kSumChunk : n;
  double m = 0;
  for (int64_t i = c * kSumChunk; i < end; ++i) {
    const double a = fabs(static_cast<double>(x[i]));
    m = m < a ? a : m;
  }
  partial[c] = m;
}
__global__ void max_partials(const double* partial, int64_t chunks, double* total) {
  double m = 0;
  for (int64_t c = 0; c < chunks; ++c) m = m < partial[c] ? partial[c] : m;
  *total = m;
}

// partial[c] = sum over chunk c of (x[i] / d)^2, in index order.
template <class T> __global__ void chunk_sq_over(const T* x, int64_t n, int64_t chunks, double d, double* partial) {
  const int64_t c = thread_index();
  if (c >= chunks) return;
  const int64_t end = (c + 1) * kSumChunk < n ? (c + 1) * kSumChunk : n;
  double s = 0;
  for (int64_t i = c * kSumChunk; i < end; ++i) {
    const double y = static_cast<double>(x[i]) / d;
    s += y * y;
  }
  partial[c] = s;
}

// *total = sum of partial (chunks) in chunk order.
__global__ void sum_partials(const double* partial, int64_t chunks, double* total) {
  double s = 0;
  for (int64_t c = 0; c < chunks; ++c) s += partial[c];
  *total = s;
}

}  // namespace

template <class T> void sgd_step(T* w, const T* g, T* m, int64_t n, T lr, T wd, T mu, bool first) {
  if (n == 0) return;
  Stage st;
  T* dw = st.out(w, n);
  const T* dg = st.in(g, n);
  T* dm = st.out(m, n);
  sgd_elems<<<blocks_for(n), kThreads, 0, stream()>>>(dw, dg, dm, n, lr, wd, mu, first);
  st.launched("sgd_step");
  st.finish();
}

template <class T>
void adam_step(T* w, const T* g, T* m, T* v, int64_t n, T lr, T wd, T b1, T b2, T eps, T bc1, T bc2,
               bool decoupled) {
  if (n == 0) return;
  Stage st;
  T* dw = st.out(w, n);
  const T* dg = st.in(g, n);
  T* dm = st.out(m, n);
  T* dv = st.out(v, n);
  adam_elems<<<blocks_for(n), kThreads, 0, stream()>>>(dw, dg, dm, dv, n, lr, wd, b1, b2, eps, bc1, bc2, decoupled);
  st.launched("adam_step");
  st.finish();
}

template <class T> double sum_of_squares(const T* x, int64_t n) {
  if (n == 0) return 0;
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  double total = 0;
  Stage st;
  const T* dx = st.in(x, n);
  double* partial = st.scratch<double>(chunks);  // (chunks)
  double* dtotal = st.scratch<double>(1);
  chunk_squares<<<blocks_for(chunks), kThreads, 0, stream()>>>(dx, n, chunks, partial);
  st.launched("sum_of_squares (chunks)");
  sum_partials<<<1, 1, 0, stream()>>>(partial, chunks, dtotal);
  st.launched("sum_of_squares");
  st.finish();
  check(cudaMemcpy(&total, dtotal, sizeof(double), cudaMemcpyDeviceToHost), "sum_of_squares: read total");
  return total;
}

// One reduction of n values to a double: `chunk` per kSumChunk values, then `fold` over the chunks.
template <class T, class Chunk, class Fold> double reduce_chunks(const char* what, const T* x, int64_t n, Chunk chunk,
                                                                 Fold fold) {
  if (n == 0) return 0;
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  double total = 0;
  Stage st;
  const T* dx = st.in(x, n);
  double* partial = st.scratch<double>(chunks);
  double* dtotal = st.scratch<double>(1);
  chunk(dx, chunks, partial);
  st.launched(what);
  fold<<<1, 1, 0, stream()>>>(partial, chunks, dtotal);
  st.launched(what);
  st.finish();
  check(cudaMemcpy(&total, dtotal, sizeof(double), cudaMemcpyDeviceToHost), what);
  return total;
}

template <class T> double max_abs(const T* x, int64_t n) {
  return reduce_chunks("max_abs", x, n, [n](const T* dx, int64_t chunks, double* partial) {
    chunk_max_abs<<<blocks_for(chunks), kThreads, 0, stream()>>>(dx, n, chunks, partial);
  }, max_partials);
}

template <class T> double sum_sq_over(const T* x, int64_t n, double d) {
  return reduce_chunks("sum_sq_over", x, n, [n, d](const T* dx, int64_t chunks, double* partial) {
    chunk_sq_over<<<blocks_for(chunks), kThreads, 0, stream()>>>(dx, n, chunks, d, partial);
  }, sum_partials);
}

#define PARITY_INSTANTIATE(T)                                                                                   \
  template double max_abs<T>(const T*, int64_t);                                                                \
  template double sum_sq_over<T>(const T*, int64_t, double);                                                    \
  template void sgd_step<T>(T*, const T*, T*, int64_t, T, T, T, bool);                                          \
  template void adam_step<T>(T*, const T*, T*, T*, int64_t, T, T, T, T, T, T, T, bool);                         \
  template double sum_of_squares<T>(const T*, int64_t);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity::cuda
