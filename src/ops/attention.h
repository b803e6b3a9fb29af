#pragma once
#include <cstdint>

namespace parity {

// Causal multi-head attention core for ONE sequence (projections are done by the caller).
// q, k, v, out: (S, H*Dh), head h owns columns [h*Dh, (h+1)*Dh).
// probs (H, S, S): softmax(q k^T / sqrt(Dh)) with j > i masked (saved for the backward;
// masked entries are 0).
template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t S, int64_t H, int64_t Dh, T* out, T* probs);
// dq, dk, dv (S, H*Dh) +=. Summation orders are written in attention.cpp.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t S, int64_t H,
                        int64_t Dh, T* dq, T* dk, T* dv);

}  // namespace parity
