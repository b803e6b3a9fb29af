// The model's normalisation, one of two ops chosen by the scenario's model.norm: LayerNorm
// (ops/layernorm.h: centred, weight and bias) or RMSNorm (ops/rmsnorm.h: not centred, weight
// only). The model and every layout call these two, so a norm is one choice everywhere.
#pragma once
#include <cstdint>

#include "ops/layernorm.h"
#include "ops/rmsnorm.h"

namespace parity {

enum class NormKind { layernorm, rmsnorm };

// x (n, D), w (D), y (n, D), rstd (n). LayerNorm: b (D) and mean (n) too; RMSNorm reads and
// writes neither (they may be null).
template <class T>
void norm_forward(NormKind k, const T* x, const T* w, const T* b, int64_t n, int64_t D, T* y, T* mean, T* rstd) {
  if (k == NormKind::rmsnorm) return rmsnorm_forward(x, w, n, D, y, rstd);
  layernorm_forward(x, w, b, n, D, y, mean, rstd);
}

// dx (n, D) +=, dw (D) +=; LayerNorm: db (D) += too (RMSNorm: mean and db unread).
template <class T>
void norm_backward(NormKind k, const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n,
                   int64_t D, T* dx, T* dw, T* db) {
  if (k == NormKind::rmsnorm) return rmsnorm_backward(x, w, rstd, dy, n, D, dx, dw);
  layernorm_backward(x, w, mean, rstd, dy, n, D, dx, dw, db);
}

}  // namespace parity
