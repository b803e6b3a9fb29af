// GPU twin of src/ops/rope.cpp: one thread per (row, head, pair), each pair rotated with the
// host's cos / sin table (ops/rope.h: the table is computed on the host, in fp64, so the GPU
// never evaluates a trigonometric function). Forward and backward are two products and one
// sum per output, IEEE on both sides (-fmad=false): results match the CPU bitwise. A thread
// reads both elements of its pair before writing either, so y may be x.
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"

namespace parity::cuda {
namespace {

// x, y (n, H·Dh); cos, sin (n, F), F = Dh / 2. backward: y is dx (+=), x is dy.
template <class T, bool kBackward>
__global__ void rope_kernel(const T* x, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* y) {
  const int64_t F = Dh / 2, pairs = n * H * F;
  for (int64_t e = thread_index(); e < pairs; e += thread_count()) {
    const int64_t i = e / (H * F), h = (e / F) % H, f = e % F;
    const int64_t a = i * H * Dh + h * Dh + f, b = a + F;
    const T c = cos[i * F + f], s = sin[i * F + f];
    const T xa = x[a], xb = x[b];
    if (kBackward) {
      y[a] += xa * c + xb * s;
      y[b] += xb * c - xa * s;
    } else {
      y[a] = xa * c - xb * s;
      y[b] = xb * c + xa * s;
    }
  }
}

template <class T, bool kBackward>
void rope_launch(const T* x, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* y, const char* op) {
  const int64_t F = Dh / 2, W = H * Dh;
  if (n * H * F <= 0) return;
  Stage st;
  const T* d_x = stage_in(st, x, n * W);
  const T* d_cos = stage_in(st, cos, n * F);
  const T* d_sin = stage_in(st, sin, n * F);
  T* d_y = stage_out(st, y, n * W);
  rope_kernel<T, kBackward><<<blocks_for(n * H * F), kThreads, 0, stream()>>>(d_x, d_cos, d_sin, n, H, Dh, d_y);
  st.launched(op);
  st.finish();
}

}  // namespace

template <class T> void rope_forward(const T* x, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* y) {
  rope_launch<T, false>(x, cos, sin, n, H, Dh, y, "rope_forward");
}

template <class T>
void rope_backward(const T* dy, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* dx) {
  rope_launch<T, true>(dy, cos, sin, n, H, Dh, dx, "rope_backward");
}

template void rope_forward<float>(const float*, const float*, const float*, int64_t, int64_t, int64_t, float*);
template void rope_forward<double>(const double*, const double*, const double*, int64_t, int64_t, int64_t, double*);
template void rope_backward<float>(const float*, const float*, const float*, int64_t, int64_t, int64_t, float*);
template void rope_backward<double>(const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                    double*);

}  // namespace parity::cuda
