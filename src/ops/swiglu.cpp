#include "ops/swiglu.h"

#include "core/fp8.h"

#include "core/device.h"
#include "core/precision.h"
#include "ops/elementwise.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#include "ops/matmul.h"
#include "ops/scalar_math.h"

namespace parity {

// h[i] = (a[i] * sigmoid(a[i])) * b[i], sigmoid stable for large |a| (silu(a) = a / (1 + exp(-a))).
// a, b, h (n).
template <class T>
void swiglu_forward(const T* a, const T* b, int64_t n, T* h) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) {
    cuda::swiglu_forward(a, b, n, h);
    storage_point(h, n);  // the kernel has finished: a storage point (on the device)
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) h[i] = (a[i] * ops_detail::stable_sigmoid(a[i])) * b[i];
  storage_point(h, n);  // a storage point (core/precision.h)
}

// With sg = sigmoid(a): silu'(a) = sg * (1 + a * (1 - sg)).
// da[i] += dh[i] * b[i] * silu'(a[i]);  db[i] += dh[i] * silu(a[i]).  (n) each.
template <class T>
void swiglu_backward(const T* a, const T* b, const T* dh, int64_t n, T* da, T* db) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::swiglu_backward(a, b, dh, n, da, db);
#endif
  for (int64_t i = 0; i < n; ++i) {
    const T sg = ops_detail::stable_sigmoid(a[i]);
    const T silu = a[i] * sg;
    const T dsilu = sg * (T(1) + a[i] * (T(1) - sg));
    da[i] += (dh[i] * b[i]) * dsilu;
    db[i] += dh[i] * silu;
  }
}

// cache.a = x·w1, cache.b = x·w3, cache.h = swiglu(a, b), each (n, F); out (n, D) = h·w2.
template <class T>
void ffn_forward(const T* x, int64_t n, int64_t D, int64_t F, const T* w1, const T* w3, const T* w2, T* out,
                 FfnCache<T>& cache) {
  cache.a = zeros<T>(n * F);
  cache.b = zeros<T>(n * F);
  cache.h = zeros<T>(n * F);
  if (fp8_on()) {  // the fp8 policy: x's E4M3 copy, the input of w1, w3 and of their weight gradients
    cache.xq = copy_of(x, n * D);
    fp8_rows(Fp8::e4m3, cache.xq.data(), n, D, false);
    x = cache.xq.data();
  }
  matmul_forward(x, w1, cache.a.data(), n, D, F);
  matmul_forward(x, w3, cache.b.data(), n, D, F);
  storage_point(cache.a.data(), n * F);  // storage points (core/precision.h): column-parallel outputs are
  storage_point(cache.b.data(), n * F);  // whole sums in every layout; w2's output may be a TP partial: not here
  swiglu_forward(cache.a.data(), cache.b.data(), n * F, cache.h.data());
  fp8_rows(Fp8::e4m3, cache.h.data(), n, F, true);  // fp8: w2's input, a row a layout splits over F
  matmul_forward(cache.h.data(), w2, out, n, F, D);
}

// dh (n, F) = dout·w2^T (and dw2 += h^T·dout); da, db (n, F) from the gate;
// then dx += da·w1^T, dw1 += x^T·da, and after that dx += db·w3^T, dw3 += x^T·db.
// Any of dx, dw1, dw3, dw2 may be nullptr (skipped).
template <class T>
void ffn_backward(const T* x, int64_t n, int64_t D, int64_t F, const T* w1, const T* w3, const T* w2,
                  const FfnCache<T>& cache, const T* dout, T* dx, T* dw1, T* dw3, T* dw2) {
  Buffer<T> dh = zeros<T>(n * F);  // (n, F)
  Buffer<T> da = zeros<T>(n * F);  // (n, F)
  Buffer<T> db = zeros<T>(n * F);  // (n, F)
  Buffer<T> dq;
  if (fp8_on()) {  // fp8: w2's output gradient E5M2 per row (whole rows: w2 is row-parallel)
    dq = copy_of(dout, n * D);
    fp8_rows(Fp8::e5m2, dq.data(), n, D, false);
    dout = dq.data(), x = cache.xq.data();
  }
  matmul_backward(cache.h.data(), w2, dout, dh.data(), dw2, n, F, D);
  swiglu_backward(cache.a.data(), cache.b.data(), dh.data(), n * F, da.data(), db.data());
  fp8_rows(Fp8::e5m2, da.data(), n, F, true);  // fp8: w1's and w3's output gradients, rows split over F
  fp8_rows(Fp8::e5m2, db.data(), n, F, true);
  matmul_backward(x, w1, da.data(), dx, dw1, n, D, F);
  matmul_backward(x, w3, db.data(), dx, dw3, n, D, F);
}

template void swiglu_forward<float>(const float*, const float*, int64_t, float*);
template void swiglu_forward<double>(const double*, const double*, int64_t, double*);
template void swiglu_backward<float>(const float*, const float*, const float*, int64_t, float*, float*);
template void swiglu_backward<double>(const double*, const double*, const double*, int64_t, double*, double*);
template void ffn_forward<float>(const float*, int64_t, int64_t, int64_t, const float*, const float*, const float*,
                                 float*, FfnCache<float>&);
template void ffn_forward<double>(const double*, int64_t, int64_t, int64_t, const double*, const double*,
                                  const double*, double*, FfnCache<double>&);
template void ffn_backward<float>(const float*, int64_t, int64_t, int64_t, const float*, const float*,
                                  const float*, const FfnCache<float>&, const float*, float*, float*, float*,
                                  float*);
template void ffn_backward<double>(const double*, int64_t, int64_t, int64_t, const double*, const double*,
                                   const double*, const FfnCache<double>&, const double*, double*, double*,
                                   double*, double*);

}  // namespace parity
