#pragma once
#include <cstdint>
#include <vector>

namespace parity {

// Grouping of the n*K (token, slot) assignments by expert. Assignment a = token*K + slot.
// Grouped row order: expert 0's assignments first, then expert 1's, ...; within an expert,
// ascending assignment index. counts (E) = rows per expert; src (n*K) = grouped row -> a.
struct Permutation {
  std::vector<int64_t> counts;  // (E)
  std::vector<int64_t> src;     // (n*K)
  int64_t K = 1;
};
// Throws parity::Error when an expert id is outside [0, E).
Permutation make_permutation(const int64_t* chosen, int64_t n, int64_t E, int64_t K);

// xg (n*K, D): xg[r] = x[src[r] / K];  x (n, D).
template <class T>
void permute_forward(const T* x, int64_t D, const Permutation& p, T* xg);
// dx (n, D) += dxg[r] into row src[r] / K; per token the K rows are summed in slot order
// (independent of expert numbering), then added to dx.
template <class T>
void permute_backward(const T* dxg, int64_t D, const Permutation& p, T* dx);

// Scatter back: y (n*K, D) with y[src[r]] = yg[r]  (pure copy: back to (token, slot) order).
template <class T>
void unpermute_forward(const T* yg, int64_t D, const Permutation& p, T* y);
// dyg (n*K, D) += dy[src[r]].
template <class T>
void unpermute_backward(const T* dy, int64_t D, const Permutation& p, T* dyg);

// Weighted combine per token, slots summed in slot order:
// out (n, D) += sum_k w[t, k] * y[t, k, :];  y (n, K, D), w (n, K).
// NOTE: this forward ACCUMULATES into out (the one exception), so the routed output can be
// added onto the shared expert's output; zero out first for a plain combine.
template <class T>
void combine_forward(const T* y, const T* w, int64_t n, int64_t K, int64_t D, T* out);
// dy (n, K, D) +=, dw (n, K) +=.
template <class T>
void combine_backward(const T* y, const T* w, const T* dout, int64_t n, int64_t K, int64_t D, T* dy, T* dw);

}  // namespace parity
