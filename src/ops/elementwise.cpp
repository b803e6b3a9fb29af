#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>

#include "core/device.h"
#include "core/precision.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#include "kernels/runtime.cuh"
#endif

namespace parity {

template <class T> void add_into(T* a, const T* b, int64_t n) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::add_into(a, b, n);
#endif
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

template <class T> void copy_values(T* dst, const T* src, int64_t n) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::copy_values(dst, src, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

template <class T> void zero_values(T* x, int64_t n) {
#if PARITY_HAVE_CUDA
  if (on_cuda() && n > 0 && cuda::device_accessible(x)) {
    cuda::check(cudaMemsetAsync(x, 0, static_cast<size_t>(n) * sizeof(T), cuda::stream()), "zero_values");
    cuda::check(cudaStreamSynchronize(cuda::stream()), "zero_values");
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) x[i] = T(0);
}

template <class T> void scale_values(T* x, T c, int64_t n) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::scale_values(x, c, n);
#endif
  for (int64_t i = 0; i < n; ++i) x[i] *= c;
}

template <class T> bool scale_find_non_finite(T* x, T c, int64_t n) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::scale_find_non_finite(x, c, n);
#endif
  bool found = false;
  for (int64_t i = 0; i < n; ++i) {
    x[i] *= c;
    found = found || !std::isfinite(x[i]);
  }
  return found;
}

template <class T> double max_abs(const T* x, int64_t n) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::max_abs(x, n);
#endif
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(static_cast<double>(x[i])));
  return m;
}

template <class T> double sum_sq_over(const T* x, int64_t n, double d) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::sum_sq_over(x, n, d);
#endif
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::pow(static_cast<double>(x[i]) / d, 2);
  return s;
}

template <class T> void transpose_into(const T* x, int64_t rows, int64_t cols, T* out) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::transpose_into(x, rows, cols, out);
#endif
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = x[i * cols + j];
}

template <class T> void storage_point(T* x, int64_t n, Low low) {
#if PARITY_HAVE_CUDA
  if (on_cuda() && low != Low::none && n > 0 && !jitter_on() && cuda::device_accessible(x))
    return cuda::round_storage(low == Low::fp16, x, n);
#endif
  to_storage(low, x, n);
}

template <class T> void storage_point(T* x, int64_t n) { storage_point(x, n, current_precision().store); }

template <class T> void grad_storage_point(T* x, int64_t n) {
  if (current_precision().store == Low::fp16) storage_point(x, n);  // only fp16 has one (core/precision.h)
}

#define PARITY_INSTANTIATE(T)                                            \
  template void storage_point<T>(T*, int64_t);                           \
  template void storage_point<T>(T*, int64_t, Low);                      \
  template void grad_storage_point<T>(T*, int64_t);                      \
  template void add_into<T>(T*, const T*, int64_t);                      \
  template void copy_values<T>(T*, const T*, int64_t);                   \
  template void scale_values<T>(T*, T, int64_t);                         \
  template bool scale_find_non_finite<T>(T*, T, int64_t);                \
  template double max_abs<T>(const T*, int64_t);                         \
  template double sum_sq_over<T>(const T*, int64_t, double);             \
  template void zero_values<T>(T*, int64_t);                             \
  template void transpose_into<T>(const T*, int64_t, int64_t, T*);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
