#pragma once
#include <cstdint>

namespace parity {

// How router logits become scores (MODEL.md); model/config.h's ModelConfig::score.
enum class Score { softmax, sigmoid };

// s (n, E) = softmax or sigmoid of logits (n, E), per row.
template <class T>
void router_scores_forward(const T* logits, int64_t n, int64_t E, Score score, T* s);
// dlogits (n, E) += from ds (n, E), using the saved scores s.
template <class T>
void router_scores_backward(const T* s, const T* ds, int64_t n, int64_t E, Score score, T* dlogits);

// chosen (n, K): per row the K experts with the largest s + bias (bias (E) may be nullptr),
// in descending order of that value; ties go to the lower expert index. No gradient.
// Requires 0 <= K <= E (else throws parity::Error).
template <class T>
void topk_select(const T* s, const T* bias, int64_t n, int64_t E, int64_t K, int64_t* chosen);

// w (n, K) = s[chosen]; if norm, w /= sum over the K (slot order, no epsilon); then w *= scale.
template <class T>
void route_weights_forward(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm,
                           double scale, T* w);
// ds (n, E) += from dw (n, K).
template <class T>
void route_weights_backward(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm,
                            double scale, const T* dw, T* ds);

}  // namespace parity
