#include "ops/rope.h"

#include "core/precision.h"
#include "ops/elementwise.h"

#include "core/device.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#include <cmath>

namespace parity {

// angle[i][f] = pos[i] * inv_freq[f], inv_freq[f] = 1 / theta^(2f / Dh), all in fp64 (the
// parity_torch reference computes the same expression in the same order).
template <class T> void rope_table(const int64_t* pos, int64_t n, int64_t Dh, double theta, T* cos, T* sin) {
  const int64_t F = Dh / 2;
  for (int64_t f = 0; f < F; ++f) {
    const double inv_freq = 1.0 / std::pow(theta, static_cast<double>(2 * f) / static_cast<double>(Dh));
    for (int64_t i = 0; i < n; ++i) {
      const double angle = static_cast<double>(pos[i]) * inv_freq;
      cos[i * F + f] = static_cast<T>(std::cos(angle));
      sin[i * F + f] = static_cast<T>(std::sin(angle));
    }
  }
}

template <class T>
void rope_forward(const T* x, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* y) {
  const int64_t W = H * Dh;
#if PARITY_HAVE_CUDA
  if (on_cuda()) {
    cuda::rope_forward(x, cos, sin, n, H, Dh, y);
    storage_point(y, n * W);  // the kernel has finished: a storage point (on the device)
    return;
  }
#endif
  const int64_t F = Dh / 2;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t f = 0; f < F; ++f) {
        const int64_t a = i * W + h * Dh + f, b = a + F;
        const T c = cos[i * F + f], s = sin[i * F + f];
        const T xa = x[a], xb = x[b];  // both read first: y may be x
        y[a] = xa * c - xb * s;
        y[b] = xb * c + xa * s;
      }
  storage_point(y, n * W);  // a storage point (core/precision.h)
}

template <class T>
void rope_backward(const T* dy, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* dx) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::rope_backward(dy, cos, sin, n, H, Dh, dx);
#endif
  const int64_t W = H * Dh, F = Dh / 2;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t f = 0; f < F; ++f) {
        const int64_t a = i * W + h * Dh + f, b = a + F;
        const T c = cos[i * F + f], s = sin[i * F + f];
        dx[a] += dy[a] * c + dy[b] * s;
        dx[b] += dy[b] * c - dy[a] * s;
      }
}

std::vector<int64_t> rope_positions(int64_t nseq, int64_t rows, int64_t p0) {
  std::vector<int64_t> pos(static_cast<size_t>(nseq * rows));
  for (int64_t r = 0; r < nseq * rows; ++r) pos[static_cast<size_t>(r)] = p0 + r % rows;
  return pos;
}

template <class T>
Rope<T>::Rope(const std::vector<int64_t>& pos, int64_t H_, int64_t Dh_, double theta)
    : n(static_cast<int64_t>(pos.size())), H(H_), Dh(Dh_), cos(zeros<T>(n * (Dh / 2))), sin(zeros<T>(n * (Dh / 2))) {
  rope_table(pos.data(), n, Dh, theta, cos.data(), sin.data());
}

template <class T> void Rope<T>::apply(Buffer<T>& x) const {
  rope_forward(x.data(), cos.data(), sin.data(), n, H, Dh, x.data());
}

template <class T> Buffer<T> Rope<T>::undo(const Buffer<T>& dy) const {
  Buffer<T> dx = zeros<T>(n * H * Dh);
  rope_backward(dy.data(), cos.data(), sin.data(), n, H, Dh, dx.data());
  return dx;
}

template struct Rope<float>;
template struct Rope<double>;

#define PARITY_INSTANTIATE(T)                                                                                       \
  template void rope_table<T>(const int64_t*, int64_t, int64_t, double, T*, T*);                                  \
  template void rope_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*);                     \
  template void rope_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
