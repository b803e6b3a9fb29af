// GPU twins of src/ops/permute.cpp (make_permutation stays on the host; these get its src
// (rows) and K). One thread per output element (row, d); where the CPU sums over slots k
// (permute_backward, combine_forward) or over d (combine_backward's dw), that thread runs
// the CPU's loop in the same order into a local accumulator added once. All results match
// the CPU bitwise (only +, * and copies).
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"

namespace parity::cuda {

namespace {

// xg[r][d] = x[src[r] / K][d];  x (n, D), src (rows), xg (rows, D).
template <class T>
__global__ void permute_fwd(const T* x, int64_t D, const int64_t* src, int64_t rows, int64_t K, T* xg) {
  const int64_t i = thread_index();
  if (i >= rows * D) return;
  const int64_t r = i / D, d = i % D;
  xg[i] = x[(src[r] / K) * D + d];
}

// inv[src[r]] = r: the grouped row of each assignment (src is a permutation, so every
// entry is written exactly once). src, inv (rows).
__global__ void invert_rows(const int64_t* src, int64_t rows, int64_t* inv) {
  const int64_t r = thread_index();
  if (r < rows) inv[src[r]] = r;
}

// dx[t][d] += (sum over k = 0..K-1 of dxg[inv[t*K + k]][d]);  dxg (n*K, D), inv (n*K), dx (n, D).
template <class T>
__global__ void permute_bwd(const T* dxg, int64_t D, const int64_t* inv, int64_t n, int64_t K, T* dx) {
  const int64_t i = thread_index();
  if (i >= n * D) return;
  const int64_t t = i / D, d = i % D;
  T acc = T(0);
  for (int64_t k = 0; k < K; ++k) acc += dxg[inv[t * K + k] * D + d];
  dx[i] += acc;
}

// y[src[r]][d] = yg[r][d];  yg (rows, D), src (rows), y (rows, D).
template <class T> __global__ void unpermute_fwd(const T* yg, int64_t D, const int64_t* src, int64_t rows, T* y) {
  const int64_t i = thread_index();
  if (i >= rows * D) return;
  const int64_t r = i / D, d = i % D;
  y[src[r] * D + d] = yg[i];
}

// dyg[r][d] += dy[src[r]][d];  dy (rows, D), src (rows), dyg (rows, D).
template <class T>
__global__ void unpermute_bwd(const T* dy, int64_t D, const int64_t* src, int64_t rows, T* dyg) {
  const int64_t i = thread_index();
  if (i >= rows * D) return;
  const int64_t r = i / D, d = i % D;
  dyg[i] += dy[src[r] * D + d];
}

// out[t][d] += (sum over k = 0..K-1 of w[t][k] * y[t][k][d]);  y (n, K, D), w (n, K), out (n, D).
template <class T> __global__ void combine_fwd(const T* y, const T* w, int64_t n, int64_t K, int64_t D, T* out) {
  const int64_t i = thread_index();
  if (i >= n * D) return;
  const int64_t t = i / D, d = i % D;
  T acc = T(0);
  for (int64_t k = 0; k < K; ++k) acc += w[t * K + k] * y[(t * K + k) * D + d];
  out[i] += acc;
}

// dy[t][k][d] += w[t][k] * dout[t][d];  w (n, K), dout (n, D), dy (n, K, D).
template <class T> __global__ void combine_bwd_dy(const T* w, const T* dout, int64_t n, int64_t K, int64_t D, T* dy) {
  const int64_t i = thread_index();
  if (i >= n * K * D) return;
  const int64_t tk = i / D, d = i % D, t = tk / K;
  dy[i] += w[tk] * dout[t * D + d];
}

// dw[t][k] += (sum over d = 0..D-1 of dout[t][d] * y[t][k][d]);  y (n, K, D), dout (n, D), dw (n, K).
template <class T> __global__ void combine_bwd_dw(const T* y, const T* dout, int64_t n, int64_t K, int64_t D, T* dw) {
  const int64_t tk = thread_index();
  if (tk >= n * K) return;
  const T* yr = y + tk * D;             // (D)
  const T* dor = dout + (tk / K) * D;   // (D)
  T acc = T(0);
  for (int64_t d = 0; d < D; ++d) acc += dor[d] * yr[d];
  dw[tk] += acc;
}

}  // namespace

template <class T> void permute_forward(const T* x, int64_t D, const int64_t* src, int64_t rows, int64_t K, T* xg) {
  if (rows * D == 0) return;  // rows > 0 implies K > 0
  const int64_t n = rows / K;
  Stage st;
  const T* dx = st.in(x, n * D);
  const int64_t* ds = st.in(src, rows);
  T* dxg = st.out(xg, rows * D);
  permute_fwd<<<blocks_for(rows * D), kThreads, 0, stream()>>>(dx, D, ds, rows, K, dxg);
  st.launched("permute_forward");
  st.finish();
}

template <class T>
void permute_backward(const T* dxg, int64_t D, const int64_t* src, int64_t rows, int64_t K, T* dx) {
  if (rows * D == 0) return;
  const int64_t n = rows / K;
  Stage st;
  const T* ddxg = st.in(dxg, rows * D);
  const int64_t* ds = st.in(src, rows);
  T* ddx = st.out(dx, n * D);
  int64_t* inv = st.scratch<int64_t>(rows);  // (n*K)
  invert_rows<<<blocks_for(rows), kThreads, 0, stream()>>>(ds, rows, inv);
  st.launched("permute_backward (inverse)");
  permute_bwd<<<blocks_for(n * D), kThreads, 0, stream()>>>(ddxg, D, inv, n, K, ddx);
  st.launched("permute_backward");
  st.finish();
}

template <class T> void unpermute_forward(const T* yg, int64_t D, const int64_t* src, int64_t rows, T* y) {
  if (rows * D == 0) return;
  Stage st;
  const T* dyg = st.in(yg, rows * D);
  const int64_t* ds = st.in(src, rows);
  T* dy = st.out(y, rows * D);
  unpermute_fwd<<<blocks_for(rows * D), kThreads, 0, stream()>>>(dyg, D, ds, rows, dy);
  st.launched("unpermute_forward");
  st.finish();
}

template <class T> void unpermute_backward(const T* dy, int64_t D, const int64_t* src, int64_t rows, T* dyg) {
  if (rows * D == 0) return;
  Stage st;
  const T* ddy = st.in(dy, rows * D);
  const int64_t* ds = st.in(src, rows);
  T* ddyg = st.out(dyg, rows * D);
  unpermute_bwd<<<blocks_for(rows * D), kThreads, 0, stream()>>>(ddy, D, ds, rows, ddyg);
  st.launched("unpermute_backward");
  st.finish();
}

// With K == 0 the CPU still does out += 0 (which turns -0 into +0), so only n*D == 0 is a no-op.
template <class T> void combine_forward(const T* y, const T* w, int64_t n, int64_t K, int64_t D, T* out) {
  if (n * D == 0) return;
  Stage st;
  const T* dy = K > 0 ? st.in(y, n * K * D) : nullptr;
  const T* dw = K > 0 ? st.in(w, n * K) : nullptr;
  T* dout = st.out(out, n * D);
  combine_fwd<<<blocks_for(n * D), kThreads, 0, stream()>>>(dy, dw, n, K, D, dout);
  st.launched("combine_forward");
  st.finish();
}

// With D == 0 the CPU still does dw += 0, so only n*K == 0 is a no-op.
template <class T>
void combine_backward(const T* y, const T* w, const T* dout, int64_t n, int64_t K, int64_t D, T* dy, T* dw) {
  if (n * K == 0) return;
  Stage st;
  const T* dyv = D > 0 ? st.in(y, n * K * D) : nullptr;
  const T* dwv = st.in(w, n * K);
  const T* ddout = D > 0 ? st.in(dout, n * D) : nullptr;
  T* ddy = D > 0 ? st.out(dy, n * K * D) : nullptr;
  T* ddw = st.out(dw, n * K);
  if (D > 0) {
    combine_bwd_dy<<<blocks_for(n * K * D), kThreads, 0, stream()>>>(dwv, ddout, n, K, D, ddy);
    st.launched("combine_backward (dy)");
  }
  combine_bwd_dw<<<blocks_for(n * K), kThreads, 0, stream()>>>(dyv, ddout, n, K, D, ddw);
  st.launched("combine_backward (dw)");
  st.finish();
}

#define PARITY_INSTANTIATE(T)                                                                                   \
  template void permute_forward<T>(const T*, int64_t, const int64_t*, int64_t, int64_t, T*);                    \
  template void permute_backward<T>(const T*, int64_t, const int64_t*, int64_t, int64_t, T*);                   \
  template void unpermute_forward<T>(const T*, int64_t, const int64_t*, int64_t, T*);                           \
  template void unpermute_backward<T>(const T*, int64_t, const int64_t*, int64_t, T*);                          \
  template void combine_forward<T>(const T*, const T*, int64_t, int64_t, int64_t, T*);                          \
  template void combine_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, T*);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity::cuda
