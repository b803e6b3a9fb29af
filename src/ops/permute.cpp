#include "ops/permute.h"

#include "core/device.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#include <string>

#include "core/error.h"
#include "ops/scalar_math.h"

namespace parity {

// Counting sort of the assignments a = 0..n*K-1 by expert chosen[a], stable in a.
// chosen (n, K), each in [0, E).
Permutation make_permutation(const int64_t* chosen, int64_t n, int64_t E, int64_t K) {
  if (n < 0 || E < 0 || K < 0) throw Error("make_permutation: negative size");
  Permutation p;
  p.K = K;
  p.counts.assign(static_cast<size_t>(E), 0);
  p.src.assign(static_cast<size_t>(n * K), 0);
  for (int64_t a = 0; a < n * K; ++a) {
    ops_detail::check_index(chosen[a], E, "make_permutation: chosen");
    ++p.counts[chosen[a]];
  }
  std::vector<int64_t> next(static_cast<size_t>(E), 0);  // (E): next free grouped row per expert
  for (int64_t e = 1; e < E; ++e) next[e] = next[e - 1] + p.counts[e - 1];
  for (int64_t a = 0; a < n * K; ++a) p.src[next[chosen[a]]++] = a;
  return p;
}

namespace {

// dst (n*K): dst[a] = the grouped row r with src[r] = a (the inverse of src).
std::vector<int64_t> inverse_rows(const Permutation& p) {
  std::vector<int64_t> dst(p.src.size(), 0);
  for (size_t r = 0; r < p.src.size(); ++r) dst[static_cast<size_t>(p.src[r])] = static_cast<int64_t>(r);
  return dst;
}

}  // namespace

// xg[r] = x[src[r] / K];  x (n, D), xg (n*K, D).
template <class T>
void permute_forward(const T* x, int64_t D, const Permutation& p, T* xg) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::permute_forward(x, D, p.src.data(), static_cast<int64_t>(p.src.size()), p.K, xg);
#endif
  const int64_t rows = static_cast<int64_t>(p.src.size());
  for (int64_t r = 0; r < rows; ++r) {
    const T* from = x + (p.src[r] / p.K) * D;  // (D)
    T* to = xg + r * D;                        // (D)
    for (int64_t d = 0; d < D; ++d) to[d] = from[d];
  }
}

// dx[t][d] += (sum over slots k in slot order, from 0, of dxg[row of assignment t*K+k][d]).
// dxg (n*K, D), dx (n, D). The order is by slot, so it does not depend on expert numbering.
template <class T>
void permute_backward(const T* dxg, int64_t D, const Permutation& p, T* dx) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::permute_backward(dxg, D, p.src.data(), static_cast<int64_t>(p.src.size()), p.K, dx);
#endif
  const int64_t K = p.K;
  const int64_t n = K > 0 ? static_cast<int64_t>(p.src.size()) / K : 0;
  const std::vector<int64_t> dst = inverse_rows(p);  // (n*K)
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t d = 0; d < D; ++d) {
      T acc = T(0);
      for (int64_t k = 0; k < K; ++k) acc += dxg[dst[t * K + k] * D + d];
      dx[t * D + d] += acc;
    }
  }
}

// y[src[r]] = yg[r];  yg (n*K, D) grouped, y (n*K, D) in (token, slot) order.
template <class T>
void unpermute_forward(const T* yg, int64_t D, const Permutation& p, T* y) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::unpermute_forward(yg, D, p.src.data(), static_cast<int64_t>(p.src.size()), y);
#endif
  const int64_t rows = static_cast<int64_t>(p.src.size());
  for (int64_t r = 0; r < rows; ++r) {
    const T* from = yg + r * D;       // (D)
    T* to = y + p.src[r] * D;         // (D)
    for (int64_t d = 0; d < D; ++d) to[d] = from[d];
  }
}

// dyg[r] += dy[src[r]];  dy (n*K, D), dyg (n*K, D).
template <class T>
void unpermute_backward(const T* dy, int64_t D, const Permutation& p, T* dyg) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::unpermute_backward(dy, D, p.src.data(), static_cast<int64_t>(p.src.size()), dyg);
#endif
  const int64_t rows = static_cast<int64_t>(p.src.size());
  for (int64_t r = 0; r < rows; ++r) {
    const T* from = dy + p.src[r] * D;  // (D)
    T* to = dyg + r * D;                // (D)
    for (int64_t d = 0; d < D; ++d) to[d] += from[d];
  }
}

// NOTE: unlike the other forwards this one ACCUMULATES, as its header says, so the caller
// can add the routed output onto the shared expert's output:
// out[t][d] += (sum over k in slot order, from 0, of w[t][k] * y[t][k][d]).
// y (n, K, D), w (n, K), out (n, D).
template <class T>
void combine_forward(const T* y, const T* w, int64_t n, int64_t K, int64_t D, T* out) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::combine_forward(y, w, n, K, D, out);
#endif
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t d = 0; d < D; ++d) {
      T acc = T(0);
      for (int64_t k = 0; k < K; ++k) acc += w[t * K + k] * y[(t * K + k) * D + d];
      out[t * D + d] += acc;
    }
  }
}

// dy[t][k][d] += w[t][k] * dout[t][d];  dw[t][k] += (sum over d in order, from 0, of
// dout[t][d] * y[t][k][d]).  dout (n, D), dy (n, K, D), dw (n, K).
template <class T>
void combine_backward(const T* y, const T* w, const T* dout, int64_t n, int64_t K, int64_t D, T* dy, T* dw) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::combine_backward(y, w, dout, n, K, D, dy, dw);
#endif
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const T* yr = y + (t * K + k) * D;  // (D)
      T* dyr = dy + (t * K + k) * D;      // (D)
      const T* dor = dout + t * D;        // (D)
      T acc = T(0);
      for (int64_t d = 0; d < D; ++d) {
        dyr[d] += w[t * K + k] * dor[d];
        acc += dor[d] * yr[d];
      }
      dw[t * K + k] += acc;
    }
  }
}

template void permute_forward<float>(const float*, int64_t, const Permutation&, float*);
template void permute_forward<double>(const double*, int64_t, const Permutation&, double*);
template void permute_backward<float>(const float*, int64_t, const Permutation&, float*);
template void permute_backward<double>(const double*, int64_t, const Permutation&, double*);
template void unpermute_forward<float>(const float*, int64_t, const Permutation&, float*);
template void unpermute_forward<double>(const double*, int64_t, const Permutation&, double*);
template void unpermute_backward<float>(const float*, int64_t, const Permutation&, float*);
template void unpermute_backward<double>(const double*, int64_t, const Permutation&, double*);
template void combine_forward<float>(const float*, const float*, int64_t, int64_t, int64_t, float*);
template void combine_forward<double>(const double*, const double*, int64_t, int64_t, int64_t, double*);
template void combine_backward<float>(const float*, const float*, const float*, int64_t, int64_t, int64_t, float*,
                                      float*);
template void combine_backward<double>(const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                       double*, double*);

}  // namespace parity
