#pragma once
#include <cstdint>

namespace parity {

inline constexpr double kLayerNormEps = 1e-5;

// Per row of x (n, D): y = (x - mean) * rstd * w + b, biased variance, eps kLayerNormEps.
// Saves mean (n) and rstd (n) for the backward.
template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, int64_t n, int64_t D, T* y, T* mean, T* rstd);
// dx (n, D) +=, dw (D) +=, db (D) += (dw, db summed over rows in row order).
template <class T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n,
                        int64_t D, T* dx, T* dw, T* db);

}  // namespace parity
