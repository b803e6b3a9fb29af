#pragma once
#include <cstdint>

namespace parity {

// losses (n) = -log softmax(logits (n, V))[target]; returns their sum (in row order).
// Computed as logsumexp(row) - row[target], logsumexp with the row max subtracted.
// A target outside [0, V) throws parity::Error.
template <class T>
T cross_entropy_forward(const T* logits, const int64_t* targets, int64_t n, int64_t V, T* losses);
// dlogits (n, V) += scale * (softmax(logits) - onehot(target)); scale = dloss / dloss_per_token.
template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, int64_t n, int64_t V, T scale, T* dlogits);

}  // namespace parity
