#pragma once
#include <cstdint>

namespace parity {

// y (n, m) = x (n, k) · w (k, m). Each y[i][j] is the sum over p = 0..k-1 in order.
template <class T>
void matmul_forward(const T* x, const T* w, T* y, int64_t n, int64_t k, int64_t m);
// dx (n, k) += dy (n, m) · w^T;  dw (k, m) += x^T · dy.  Either may be nullptr (skipped).
template <class T>
void matmul_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t n, int64_t k, int64_t m);

}  // namespace parity
