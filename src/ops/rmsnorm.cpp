#include "ops/rmsnorm.h"

#include "core/precision.h"
#include "ops/elementwise.h"

#include "core/device.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#include <cmath>
#include <vector>

namespace parity {

// Per row i of x (n, D):
//   ms      = (sum_d x[i][d]^2) / D                     (d order)
//   rstd[i] = 1 / sqrt(ms + eps)
//   y[i][d] = (x[i][d] * rstd) * w[d]
// w (D), y (n, D), rstd (n). D = 0 gives rstd 1/sqrt(eps).
template <class T>
void rmsnorm_forward(const T* x, const T* w, int64_t n, int64_t D, T* y, T* rstd) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) {
    cuda::rmsnorm_forward(x, w, n, D, y, rstd);
    storage_point(y, n * D);  // the kernel has finished: a storage point (on the device)
    return;
  }
#endif
  const T eps = T(kRmsNormEps);
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * D;  // (D)
    T* yr = y + i * D;        // (D)
    T sq = T(0);
    for (int64_t d = 0; d < D; ++d) sq += xr[d] * xr[d];
    const T ms = D > 0 ? sq / T(D) : T(0);
    const T rs = T(1) / std::sqrt(ms + eps);
    for (int64_t d = 0; d < D; ++d) yr[d] = (xr[d] * rs) * w[d];
    rstd[i] = rs;
  }
  storage_point(y, n * D);  // a storage point of the precision policy (core/precision.h); rstd stays
}

// With xhat = x * rstd and g = dy * w (per element), per row:
//   dx[d] += rstd * (g[d] - xhat[d] * mean_gx),  mean_gx = (sum_d g[d] * xhat[d]) / D   (d order).
// dw[d] += sum over rows (in row order, from 0) of dy * xhat.
template <class T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, int64_t n, int64_t D, T* dx, T* dw) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::rmsnorm_backward(x, w, rstd, dy, n, D, dx, dw);
#endif
  std::vector<T> dw_acc(static_cast<size_t>(D), T(0));  // (D)
  std::vector<T> xhat(static_cast<size_t>(D));          // (D), one row
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * D;    // (D)
    const T* dyr = dy + i * D;  // (D)
    T* dxr = dx + i * D;        // (D)
    const T rs = rstd[i];
    T sum_gx = T(0);
    for (int64_t d = 0; d < D; ++d) {
      xhat[d] = xr[d] * rs;
      sum_gx += (dyr[d] * w[d]) * xhat[d];
      dw_acc[d] += dyr[d] * xhat[d];
    }
    const T mean_gx = D > 0 ? sum_gx / T(D) : T(0);
    for (int64_t d = 0; d < D; ++d) dxr[d] += rs * (dyr[d] * w[d] - xhat[d] * mean_gx);
  }
  for (int64_t d = 0; d < D; ++d) dw[d] += dw_acc[d];
}

template void rmsnorm_forward<float>(const float*, const float*, int64_t, int64_t, float*, float*);
template void rmsnorm_forward<double>(const double*, const double*, int64_t, int64_t, double*, double*);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*, int64_t, int64_t,
                                      float*, float*);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*, int64_t,
                                       int64_t, double*, double*);

}  // namespace parity
