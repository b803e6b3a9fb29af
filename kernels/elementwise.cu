// GPU twins of the flat-buffer helpers (core/vec.h, ops/elementwise.h), one thread per
// output element; no reductions, so every result is bitwise the CPU's.
//   add_into       a[i] += b[i]
//   copy_values    dst[i] = src[i]
//   scale_values   x[i] *= c
//   scale_find_non_finite  x[i] *= c, and a flag set where a result is an inf or a NaN
//   transpose_into out (cols, rows) from x (rows, cols): out[j*rows + i] = x[i*cols + j]
//   round_storage  x[i] rounded to bf16 or fp16 (core/precision.h's round_bf16 / round_fp16)
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"

namespace parity::cuda {

namespace {

// a (n) += b (n).
template <class T> __global__ void add_elems(T* a, const T* b, int64_t n) {
  const int64_t i = thread_index();
  if (i < n) a[i] += b[i];
}

// dst (n) = src (n).
template <class T> __global__ void copy_elems(T* dst, const T* src, int64_t n) {
  const int64_t i = thread_index();
  if (i < n) dst[i] = src[i];
}

// x (n) *= c.
template <class T> __global__ void scale_elems(T* x, T c, int64_t n) {
  const int64_t i = thread_index();
  if (i < n) x[i] *= c;
}

// x (n) *= c; *flag = 1 where a result is not finite (every writer stores the same 1: the flag
// does not depend on the order).
template <class T> __global__ void scale_flag_elems(T* x, T c, int64_t n, int* flag) {
  const int64_t i = thread_index();
  if (i >= n) return;
  x[i] *= c;
  if (!isfinite(x[i])) *flag = 1;
}

// out (cols, rows)[j][i] = x (rows, cols)[i][j]; thread o = j * rows + i.
template <class T> __global__ void transpose_elems(const T* x, int64_t rows, int64_t cols, T* out) {
  const int64_t o = thread_index();
  if (o >= rows * cols) return;
  const int64_t j = o / rows, i = o % rows;
  out[o] = x[i * cols + j];
}

// core/precision.h's round_bf16: to the nearest bf16, ties to even, on the bits; NaN stays a
// quiet NaN, infinities stay.
__device__ float round_bf16_bits(float x) {
  unsigned b = __float_as_uint(x);
  if ((b & 0x7f800000u) == 0x7f800000u) {
    if (b & 0x007fffffu) b |= 0x00400000u;
    b &= 0xffff0000u;
  } else {
    b += 0x7fffu + ((b >> 16) & 1u);
    b &= 0xffff0000u;
  }
  return __uint_as_float(b);
}

// core/precision.h's round_fp16, the same expression: |x| / quantum is exact (a power of two),
// rint rounds ties to even; 65520 and up to infinity with the sign; non-finite values stay.
__device__ float round_fp16_exact(float x) {
  if (!isfinite(x)) return x;
  const double a = fabs(static_cast<double>(x));
  if (a >= 65520.0) return copysignf(INFINITY, x);
  int e = 0;
  (void)frexp(a, &e);
  const double q = ldexp(1.0, max(e - 11, -24));
  return static_cast<float>(copysign(rint(a / q) * q, static_cast<double>(x)));
}

// x (n) rounded in place; a double is rounded as its float, as the host does.
template <class T> __global__ void round_elems(bool fp16, T* x, int64_t n) {
  const int64_t i = thread_index();
  if (i >= n) return;
  const float f = static_cast<float>(x[i]);
  x[i] = static_cast<T>(fp16 ? round_fp16_exact(f) : round_bf16_bits(f));
}

}  // namespace

template <class T> void round_storage(bool fp16, T* x, int64_t n) {
  if (n == 0) return;
  Stage st;
  T* dx = st.out(x, n);
  round_elems<<<blocks_for(n), kThreads, 0, stream()>>>(fp16, dx, n);
  st.launched("round_storage");
  st.finish();
}

template <class T> void add_into(T* a, const T* b, int64_t n) {
  if (n == 0) return;
  Stage st;
  T* da = st.out(a, n);
  const T* db = st.in(b, n);
  add_elems<<<blocks_for(n), kThreads, 0, stream()>>>(da, db, n);
  st.launched("add_into");
  st.finish();
}

template <class T> void copy_values(T* dst, const T* src, int64_t n) {
  if (n == 0) return;
  Stage st;
  T* dd = st.out(dst, n);
  const T* ds = st.in(src, n);
  copy_elems<<<blocks_for(n), kThreads, 0, stream()>>>(dd, ds, n);
  st.launched("copy_values");
  st.finish();
}

template <class T> void scale_values(T* x, T c, int64_t n) {
  if (n == 0) return;
  Stage st;
  T* dx = st.out(x, n);
  scale_elems<<<blocks_for(n), kThreads, 0, stream()>>>(dx, c, n);
  st.launched("scale_values");
  st.finish();
}

template <class T> bool scale_find_non_finite(T* x, T c, int64_t n) {
  if (n == 0) return false;
  int found = 0;
  Stage st;
  T* dx = st.out(x, n);
  int* flag = st.scratch<int>(1);
  scale_flag_elems<<<blocks_for(n), kThreads, 0, stream()>>>(dx, c, n, flag);
  st.launched("scale_find_non_finite");
  check(cudaMemcpyAsync(&found, flag, sizeof(int), cudaMemcpyDeviceToHost, stream()), "scale_find_non_finite: flag");
  st.finish();
  return found != 0;
}

template <class T> void transpose_into(const T* x, int64_t rows, int64_t cols, T* out) {
  if (rows * cols == 0) return;
  Stage st;
  const T* dx = st.in(x, rows * cols);
  T* dout = st.out(out, rows * cols);
  transpose_elems<<<blocks_for(rows * cols), kThreads, 0, stream()>>>(dx, rows, cols, dout);
  st.launched("transpose_into");
  st.finish();
}

#define PARITY_INSTANTIATE(T)                                            \
  template void round_storage<T>(bool, T*, int64_t);                     \
  template void add_into<T>(T*, const T*, int64_t);                      \
  template void copy_values<T>(T*, const T*, int64_t);                   \
  template void scale_values<T>(T*, T, int64_t);                         \
  template bool scale_find_non_finite<T>(T*, T, int64_t);                \
  template void transpose_into<T>(const T*, int64_t, int64_t, T*);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity::cuda
