#pragma once
#include <cstdint>

namespace parity {

// Sequence-wise balance loss of ONE sequence (MODEL.md): returns sum_e f_e * p_e with
// f_e = E / (K*S) * #{tokens whose chosen (S, K) contains e}   (a count: no gradient),
// p_e = (1/S) * sum_tokens shat_e, shat = s / sum(s) per token;  s (S, E).
// The caller multiplies by aux_alpha / B.
template <class T>
T aux_loss_forward(const T* s, const int64_t* chosen, int64_t S, int64_t E, int64_t K);
// ds (S, E) += dloss * d(sum_e f_e p_e)/ds.
template <class T>
void aux_loss_backward(const T* s, const int64_t* chosen, int64_t S, int64_t E, int64_t K, T dloss, T* ds);

}  // namespace parity
