#include "ops/matmul.h"

namespace parity {

// y (n, m) = x (n, k) · w (k, m); y[i][j] = sum over p = 0..k-1 in order, from 0.
template <class T>
void matmul_forward(const T* x, const T* w, T* y, int64_t n, int64_t k, int64_t m) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      T acc = T(0);
      for (int64_t p = 0; p < k; ++p) acc += x[i * k + p] * w[p * m + j];
      y[i * m + j] = acc;
    }
  }
}

// dx (n, k) += dy (n, m) · w^T: dx[i][p] += (sum over j in order, from 0).
// dw (k, m) += x^T · dy (n, m):  dw[p][j] += (sum over i in order, from 0).
template <class T>
void matmul_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t n, int64_t k, int64_t m) {
  if (dx != nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        T acc = T(0);
        for (int64_t j = 0; j < m; ++j) acc += dy[i * m + j] * w[p * m + j];
        dx[i * k + p] += acc;
      }
    }
  }
  if (dw != nullptr) {
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = 0; j < m; ++j) {
        T acc = T(0);
        for (int64_t i = 0; i < n; ++i) acc += x[i * k + p] * dy[i * m + j];
        dw[p * m + j] += acc;
      }
    }
  }
}

template void matmul_forward<float>(const float*, const float*, float*, int64_t, int64_t, int64_t);
template void matmul_forward<double>(const double*, const double*, double*, int64_t, int64_t, int64_t);
template void matmul_backward<float>(const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                                     int64_t);
template void matmul_backward<double>(const double*, const double*, const double*, double*, double*, int64_t,
                                      int64_t, int64_t);

}  // namespace parity
