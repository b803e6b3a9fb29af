#pragma once
#include <cstdint>

namespace parity {

// out (n, D) = table[ids]; table (V, D); ids (n), each in [0, V).
template <class T>
void embedding_forward(const int64_t* ids, int64_t n, const T* table, int64_t V, int64_t D, T* out);
// dtable (V, D) += scatter-add of dout (n, D) by ids, in token order (each row added straight
// into dtable). An id outside [0, V) throws parity::Error.
template <class T>
void embedding_backward(const int64_t* ids, int64_t n, const T* dout, int64_t V, int64_t D, T* dtable);

}  // namespace parity
