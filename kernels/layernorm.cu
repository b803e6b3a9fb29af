// GPU twin of src/ops/layernorm.cpp. Every sum runs in one thread, in the CPU's order:
//   forward:  one thread per row i: mean[i] = (sum_d x) / D, rstd[i] from (sum_d (x - mean)^2) / D
//             (d order); then one thread per (i, d): y = ((x - mean) * rstd) * w + b.
//   backward: one thread per row i: mean_g, mean_gx (d order); one thread per (i, d) of dx;
//             one thread per column d: dw[d], db[d] summed over rows in row order from 0,
//             added to the output once, as the CPU's dw_acc / db_acc.
// +, -, *, / and sqrt are IEEE on both sides (-fmad=false), so results match the CPU bitwise.
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"
#include "ops/layernorm.h"

namespace parity::cuda {
namespace {

// Stage a buffer only when it has elements (a 0-sized buffer is passed as nullptr, unread).

// Row statistics, one thread per row. x (n, D), mean (n), rstd (n).
template <class T>
__global__ void ln_stats_kernel(const T* x, int64_t n, int64_t D, T eps, T* mean, T* rstd) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const T* xr = x + i * D;  // (D)
    T sum = T(0);
    for (int64_t d = 0; d < D; ++d) sum += xr[d];
    const T mu = D > 0 ? sum / T(D) : T(0);
    T sq = T(0);
    for (int64_t d = 0; d < D; ++d) {
      const T c = xr[d] - mu;
      sq += c * c;
    }
    const T var = D > 0 ? sq / T(D) : T(0);
    mean[i] = mu;
    rstd[i] = T(1) / dev_sqrt(var + eps);
  }
}

// y (n, D), one thread per element; w (D), b (D), mean (n), rstd (n).
template <class T>
__global__ void ln_apply_kernel(const T* x, const T* w, const T* b, const T* mean, const T* rstd, int64_t n,
                                int64_t D, T* y) {
  for (int64_t e = thread_index(); e < n * D; e += thread_count()) {
    const int64_t i = e / D, d = e % D;
    y[e] = ((x[e] - mean[i]) * rstd[i]) * w[d] + b[d];
  }
}

// Per row: mg[2i] = mean_g, mg[2i+1] = mean_gx, with g = dy * w, xhat = (x - mean) * rstd (d order).
template <class T>
__global__ void ln_row_grad_kernel(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n,
                                   int64_t D, T* mg) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const T* xr = x + i * D;    // (D)
    const T* dyr = dy + i * D;  // (D)
    const T mu = mean[i], rs = rstd[i];
    T sum_g = T(0), sum_gx = T(0);
    for (int64_t d = 0; d < D; ++d) {
      const T xhat = (xr[d] - mu) * rs;
      const T g = dyr[d] * w[d];
      sum_g += g;
      sum_gx += g * xhat;
    }
    mg[2 * i] = D > 0 ? sum_g / T(D) : T(0);
    mg[2 * i + 1] = D > 0 ? sum_gx / T(D) : T(0);
  }
}

// dx (n, D) += rstd * ((dy * w - mean_g) - xhat * mean_gx), one thread per element.
template <class T>
__global__ void ln_dx_kernel(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, const T* mg,
                             int64_t n, int64_t D, T* dx) {
  for (int64_t e = thread_index(); e < n * D; e += thread_count()) {
    const int64_t i = e / D, d = e % D;
    const T rs = rstd[i];
    const T xhat = (x[e] - mean[i]) * rs;
    dx[e] += rs * ((dy[e] * w[d] - mg[2 * i]) - xhat * mg[2 * i + 1]);
  }
}

// dw[d] += sum_i dy * xhat, db[d] += sum_i dy (rows in order from 0), one thread per column d.
template <class T>
__global__ void ln_params_kernel(const T* x, const T* mean, const T* rstd, const T* dy, int64_t n, int64_t D,
                                 T* dw, T* db) {
  for (int64_t d = thread_index(); d < D; d += thread_count()) {
    T dw_acc = T(0), db_acc = T(0);
    for (int64_t i = 0; i < n; ++i) {
      const T xhat = (x[i * D + d] - mean[i]) * rstd[i];
      dw_acc += dy[i * D + d] * xhat;
      db_acc += dy[i * D + d];
    }
    dw[d] += dw_acc;
    db[d] += db_acc;
  }
}

}  // namespace

// x (n, D), w (D), b (D), y (n, D), mean (n), rstd (n).
template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, int64_t n, int64_t D, T* y, T* mean, T* rstd) {
  if (n <= 0) return;  // D = 0 still writes mean 0, rstd 1/sqrt(eps)
  Stage st;
  const T* d_x = stage_in(st, x, n * D);
  const T* d_w = stage_in(st, w, D);
  const T* d_b = stage_in(st, b, D);
  T* d_y = stage_out(st, y, n * D);
  T* d_mean = st.out(mean, n);
  T* d_rstd = st.out(rstd, n);
  ln_stats_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d_x, n, D, T(kLayerNormEps), d_mean, d_rstd);
  st.launched("layernorm_forward");
  if (D > 0) {
    ln_apply_kernel<<<blocks_for(n * D), kThreads, 0, stream()>>>(d_x, d_w, d_b, d_mean, d_rstd, n, D, d_y);
    st.launched("layernorm_forward");
  }
  st.finish();
}

// dx (n, D) +=, dw (D) +=, db (D) +=.
template <class T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n, int64_t D,
                        T* dx, T* dw, T* db) {
  if (D <= 0) return;  // n = 0 still adds the (zero) sums to dw, db, as the CPU does
  Stage st;
  const T* d_x = stage_in(st, x, n * D);
  const T* d_w = st.in(w, D);
  const T* d_mean = stage_in(st, mean, n);
  const T* d_rstd = stage_in(st, rstd, n);
  const T* d_dy = stage_in(st, dy, n * D);
  T* d_dx = stage_out(st, dx, n * D);
  T* d_dw = st.out(dw, D);
  T* d_db = st.out(db, D);
  if (n > 0) {
    T* mg = st.scratch<T>(2 * n);  // (n, 2): mean_g, mean_gx
    ln_row_grad_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d_x, d_w, d_mean, d_rstd, d_dy, n, D, mg);
    st.launched("layernorm_backward");
    ln_dx_kernel<<<blocks_for(n * D), kThreads, 0, stream()>>>(d_x, d_w, d_mean, d_rstd, d_dy, mg, n, D, d_dx);
    st.launched("layernorm_backward");
  }
  ln_params_kernel<<<blocks_for(D), kThreads, 0, stream()>>>(d_x, d_mean, d_rstd, d_dy, n, D, d_dw, d_db);
  st.launched("layernorm_backward");
  st.finish();
}

template void layernorm_forward<float>(const float*, const float*, const float*, int64_t, int64_t, float*, float*,
                                       float*);
template void layernorm_forward<double>(const double*, const double*, const double*, int64_t, int64_t, double*,
                                        double*, double*);
template void layernorm_backward<float>(const float*, const float*, const float*, const float*, const float*,
                                        int64_t, int64_t, float*, float*, float*);
template void layernorm_backward<double>(const double*, const double*, const double*, const double*,
                                         const double*, int64_t, int64_t, double*, double*, double*);

}  // namespace parity::cuda
