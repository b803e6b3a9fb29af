#pragma once
#include <cstdint>

namespace parity {

// y (n, m) = x (n, k) · w (k, m). Each y[i][j] is the sum over p = 0..k-1 in order,
// starting from 0, with a separate multiply and add per term (no FMA): bitwise the same
// as the naive triple loop `acc = 0; for p: acc += x[i][p] * w[p][j]; y[i][j] = acc`.
template <class T>
void matmul_forward(const T* x, const T* w, T* y, int64_t n, int64_t k, int64_t m);
// dx (n, k) += dy (n, m) · w^T;  dw (k, m) += x^T · dy.  Either may be nullptr (skipped).
// Summation orders (each sum starts from 0, then is added to the gradient once):
//   dx[i][p] += sum over j = 0..m-1 in order of dy[i][j] * w[p][j]
//   dw[p][j] += sum over i = 0..n-1 in order of x[i][p] * dy[i][j]
template <class T>
void matmul_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t n, int64_t k, int64_t m);

// The kernels are vectorised over output columns only, so every instruction set gives
// bitwise the same results; `automatic` (what the functions above use) picks avx2 when the
// CPU has it. The explicit choice is for tests and benchmarks; an unavailable one throws.
enum class MatmulIsa { automatic, baseline, avx2 };
bool matmul_isa_available(MatmulIsa isa);
template <class T>
void matmul_forward(const T* x, const T* w, T* y, int64_t n, int64_t k, int64_t m, MatmulIsa isa);
template <class T>
void matmul_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t n, int64_t k, int64_t m,
                     MatmulIsa isa);

}  // namespace parity
