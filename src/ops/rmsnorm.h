#pragma once
#include <cstdint>

namespace parity {

inline constexpr double kRmsNormEps = 1e-5;  // Llama 3's norm_eps

// Per row of x (n, D): y = (x * rstd) * w, rstd = 1 / sqrt((sum_d x^2) / D + eps): no centring,
// no bias. Saves rstd (n) for the backward.
template <class T>
void rmsnorm_forward(const T* x, const T* w, int64_t n, int64_t D, T* y, T* rstd);
// dx (n, D) +=, dw (D) += (dw summed over rows in row order).
template <class T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, int64_t n, int64_t D, T* dx, T* dw);

}  // namespace parity
