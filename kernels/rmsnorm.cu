// GPU twin of src/ops/rmsnorm.cpp. Every sum runs in one thread, in the CPU's order:
//   forward:  one thread per row i: rstd[i] from (sum_d x^2) / D (d order); then one thread per
//             (i, d): y = (x * rstd) * w.
//   backward: one thread per row i: mean_gx (d order); one thread per (i, d) of dx; one thread
//             per column d: dw[d] summed over rows in row order from 0, added to the output once,
//             as the CPU's dw_acc.
// +, -, *, / and sqrt are IEEE on both sides (-fmad=false), so results match the CPU bitwise.
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"
#include "ops/rmsnorm.h"

namespace parity::cuda {
namespace {

// rstd (n), one thread per row; x (n, D).
template <class T> __global__ void rms_stats_kernel(const T* x, int64_t n, int64_t D, T eps, T* rstd) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const T* xr = x + i * D;  // (D)
    T sq = T(0);
    for (int64_t d = 0; d < D; ++d) sq += xr[d] * xr[d];
    const T ms = D > 0 ? sq / T(D) : T(0);
    rstd[i] = T(1) / dev_sqrt(ms + eps);
  }
}

// y (n, D), one thread per element; w (D), rstd (n).
template <class T>
__global__ void rms_apply_kernel(const T* x, const T* w, const T* rstd, int64_t n, int64_t D, T* y) {
  for (int64_t e = thread_index(); e < n * D; e += thread_count()) {
    const int64_t i = e / D, d = e % D;
    y[e] = (x[e] * rstd[i]) * w[d];
  }
}

// Per row: mg[i] = mean_gx, with g = dy * w, xhat = x * rstd (d order).
template <class T>
__global__ void rms_row_grad_kernel(const T* x, const T* w, const T* rstd, const T* dy, int64_t n, int64_t D,
                                    T* mg) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const T* xr = x + i * D;    // (D)
    const T* dyr = dy + i * D;  // (D)
    const T rs = rstd[i];
    T sum_gx = T(0);
    for (int64_t d = 0; d < D; ++d) sum_gx += (dyr[d] * w[d]) * (xr[d] * rs);
    mg[i] = D > 0 ? sum_gx / T(D) : T(0);
  }
}

// dx (n, D) += rstd * (dy * w - xhat * mean_gx), one thread per element.
template <class T>
__global__ void rms_dx_kernel(const T* x, const T* w, const T* rstd, const T* dy, const T* mg, int64_t n,
                              int64_t D, T* dx) {
  for (int64_t e = thread_index(); e < n * D; e += thread_count()) {
    const int64_t i = e / D, d = e % D;
    const T rs = rstd[i];
    dx[e] += rs * (dy[e] * w[d] - (x[e] * rs) * mg[i]);
  }
}

// dw[d] += sum_i dy * xhat (rows in order from 0), one thread per column d.
template <class T>
__global__ void rms_params_kernel(const T* x, const T* rstd, const T* dy, int64_t n, int64_t D, T* dw) {
  for (int64_t d = thread_index(); d < D; d += thread_count()) {
    T dw_acc = T(0);
    for (int64_t i = 0; i < n; ++i) dw_acc += dy[i * D + d] * (x[i * D + d] * rstd[i]);
    dw[d] += dw_acc;
  }
}

}  // namespace

// x (n, D), w (D), y (n, D), rstd (n).
template <class T> void rmsnorm_forward(const T* x, const T* w, int64_t n, int64_t D, T* y, T* rstd) {
  if (n <= 0) return;  // D = 0 still writes rstd 1/sqrt(eps)
  Stage st;
  const T* d_x = stage_in(st, x, n * D);
  const T* d_w = stage_in(st, w, D);
  T* d_y = stage_out(st, y, n * D);
  T* d_rstd = st.out(rstd, n);
  rms_stats_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d_x, n, D, T(kRmsNormEps), d_rstd);
  st.launched("rmsnorm_forward");
  if (D > 0) {
    rms_apply_kernel<<<blocks_for(n * D), kThreads, 0, stream()>>>(d_x, d_w, d_rstd, n, D, d_y);
    st.launched("rmsnorm_forward");
  }
  st.finish();
}

// dx (n, D) +=, dw (D) +=.
template <class T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, int64_t n, int64_t D, T* dx, T* dw) {
  if (D <= 0) return;  // n = 0 still adds the (zero) sums to dw, as the CPU does
  Stage st;
  const T* d_x = stage_in(st, x, n * D);
  const T* d_w = st.in(w, D);
  const T* d_rstd = stage_in(st, rstd, n);
  const T* d_dy = stage_in(st, dy, n * D);
  T* d_dx = stage_out(st, dx, n * D);
  T* d_dw = st.out(dw, D);
  if (n > 0) {
    T* mg = st.scratch<T>(n);  // (n): mean_gx
    rms_row_grad_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d_x, d_w, d_rstd, d_dy, n, D, mg);
    st.launched("rmsnorm_backward");
    rms_dx_kernel<<<blocks_for(n * D), kThreads, 0, stream()>>>(d_x, d_w, d_rstd, d_dy, mg, n, D, d_dx);
    st.launched("rmsnorm_backward");
  }
  rms_params_kernel<<<blocks_for(D), kThreads, 0, stream()>>>(d_x, d_rstd, d_dy, n, D, d_dw);
  st.launched("rmsnorm_backward");
  st.finish();
}

template void rmsnorm_forward<float>(const float*, const float*, int64_t, int64_t, float*, float*);
template void rmsnorm_forward<double>(const double*, const double*, int64_t, int64_t, double*, double*);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*, int64_t, int64_t,
                                      float*, float*);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*, int64_t,
                                       int64_t, double*, double*);

}  // namespace parity::cuda
