#pragma once
#include <cstdint>
#include <vector>

#include "core/buffer.h"

namespace parity {

// Elementwise gate: h (n) = silu(a) * b, silu(a) = a / (1 + exp(-a)), computed as
// (a * sigmoid(a)) * b with a sigmoid that is stable for large |a|.
template <class T>
void swiglu_forward(const T* a, const T* b, int64_t n, T* h);
// da (n) +=, db (n) +=.
template <class T>
void swiglu_backward(const T* a, const T* b, const T* dh, int64_t n, T* da, T* db);

// Activations an FFN saves for its backward: a = x·w1, b = x·w3, h = silu(a)*b, each (n, F); under
// the fp8 policy (core/fp8.h) xq, x quantized to E4M3 per row, and h is w2's quantized input.
template <class T> struct FfnCache {
  Buffer<T> a, b, h, xq;
};

// SwiGLU FFN (dense MLP, shared expert, one routed expert):
// out (n, D) = (silu(x·w1) ⊙ (x·w3)) · w2;  x (n, D), w1 (D, F), w3 (D, F), w2 (F, D).
// Under fp8 the three are linears with fp8 inputs: x per row (whole here), h per row over F (split
// by a layout's TP / ETP: the amax of fp8_split()); the backward's output gradients E5M2 per row.
template <class T>
void ffn_forward(const T* x, int64_t n, int64_t D, int64_t F, const T* w1, const T* w3, const T* w2, T* out,
                 FfnCache<T>& cache);
// dx (n, D) +=, dw1, dw3 (D, F) +=, dw2 (F, D) +=. Any of them may be nullptr (skipped).
// dx gets the w1 branch first, then the w3 branch (each a matmul_backward).
template <class T>
void ffn_backward(const T* x, int64_t n, int64_t D, int64_t F, const T* w1, const T* w3, const T* w2,
                  const FfnCache<T>& cache, const T* dout, T* dx, T* dw1, T* dw3, T* dw2);

}  // namespace parity
