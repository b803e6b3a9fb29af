#include "ops/layernorm.h"

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
//   mean[i] = (sum_d x[i][d]) / D                       (sum in d order)
//   var     = (sum_d (x[i][d] - mean)^2) / D            (biased, d order)
//   rstd[i] = 1 / sqrt(var + eps)
//   y[i][d] = ((x[i][d] - mean) * rstd) * w[d] + b[d]
// w (D), b (D), y (n, D), mean (n), rstd (n). D = 0 gives mean 0, rstd 1/sqrt(eps).
template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, int64_t n, int64_t D, T* y, T* mean, T* rstd) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) {
    cuda::layernorm_forward(x, w, b, n, D, y, mean, rstd);
    storage_point(y, n * D);  // the kernel has finished: a storage point (on the device)
    return;
  }
#endif
  const T eps = T(kLayerNormEps);
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * D;  // (D)
    T* yr = y + i * D;        // (D)
    T sum = T(0);
    for (int64_t d = 0; d < D; ++d) sum += xr[d];
    const T mu = D > 0 ? sum / T(D) : T(0);
    T sq = T(0);
    for (int64_t d = 0; d < D; ++d) {
      const T c = xr[d] - mu;
      sq += c * c;
    }
    const T var = D > 0 ? sq / T(D) : T(0);
    const T rs = T(1) / std::sqrt(var + eps);
    for (int64_t d = 0; d < D; ++d) yr[d] = ((xr[d] - mu) * rs) * w[d] + b[d];
    mean[i] = mu;
    rstd[i] = rs;
  }
  storage_point(y, n * D);  // a storage point of the precision policy (core/precision.h); stats stay
}

// With xhat = (x - mean) * rstd and g = dy * w (per element), per row:
//   dx[d] += rstd * ((g[d] - mean_g) - xhat[d] * mean_gx),
//   mean_g = (sum_d g[d]) / D, mean_gx = (sum_d g[d] * xhat[d]) / D   (d order).
// dw[d] += sum over rows (in row order, from 0) of dy * xhat; db[d] += sum over rows of dy.
template <class T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n,
                        int64_t D, T* dx, T* dw, T* db) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::layernorm_backward(x, w, mean, rstd, dy, n, D, dx, dw, db);
#endif
  std::vector<T> dw_acc(static_cast<size_t>(D), T(0));  // (D)
  std::vector<T> db_acc(static_cast<size_t>(D), T(0));  // (D)
  std::vector<T> xhat(static_cast<size_t>(D));          // (D), one row
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * D;    // (D)
    const T* dyr = dy + i * D;  // (D)
    T* dxr = dx + i * D;        // (D)
    const T mu = mean[i], rs = rstd[i];
    T sum_g = T(0), sum_gx = T(0);
    for (int64_t d = 0; d < D; ++d) {
      xhat[d] = (xr[d] - mu) * rs;
      const T g = dyr[d] * w[d];
      sum_g += g;
      sum_gx += g * xhat[d];
      dw_acc[d] += dyr[d] * xhat[d];
      db_acc[d] += dyr[d];
    }
    const T mean_g = D > 0 ? sum_g / T(D) : T(0);
    const T mean_gx = D > 0 ? sum_gx / T(D) : T(0);
    for (int64_t d = 0; d < D; ++d) dxr[d] += rs * ((dyr[d] * w[d] - mean_g) - xhat[d] * mean_gx);
  }
  for (int64_t d = 0; d < D; ++d) {
    dw[d] += dw_acc[d];
    db[d] += db_acc[d];
  }
}

template void layernorm_forward<float>(const float*, const float*, const float*, int64_t, int64_t, float*, float*,
                                       float*);
template void layernorm_forward<double>(const double*, const double*, const double*, int64_t, int64_t, double*,
                                        double*, double*);
template void layernorm_backward<float>(const float*, const float*, const float*, const float*, const float*,
                                        int64_t, int64_t, float*, float*, float*);
template void layernorm_backward<double>(const double*, const double*, const double*, const double*,
                                         const double*, int64_t, int64_t, double*, double*, double*);

}  // namespace parity
