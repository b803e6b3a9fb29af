#include "ops/embedding.h"

#include "core/device.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#include "ops/scalar_math.h"

namespace parity {

// out[t] = table[ids[t]];  ids (n), table (V, D), out (n, D).
template <class T>
void embedding_forward(const int64_t* ids, int64_t n, const T* table, int64_t V, int64_t D, T* out) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::embedding_forward(ids, n, table, V, D, out);
#endif
  for (int64_t t = 0; t < n; ++t) {
    ops_detail::check_index(ids[t], V, "embedding_forward: id");
    const T* src = table + ids[t] * D;  // (D)
    T* dst = out + t * D;               // (D)
    for (int64_t d = 0; d < D; ++d) dst[d] = src[d];
  }
}

// dtable[ids[t]] += dout[t], one token after another in token order (a repeated id adds
// its rows straight into dtable in that order).  dout (n, D), dtable (V, D).
template <class T>
void embedding_backward(const int64_t* ids, int64_t n, const T* dout, int64_t V, int64_t D, T* dtable) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::embedding_backward(ids, n, dout, V, D, dtable);
#endif
  for (int64_t t = 0; t < n; ++t) {
    ops_detail::check_index(ids[t], V, "embedding_backward: id");
    const T* src = dout + t * D;     // (D)
    T* dst = dtable + ids[t] * D;    // (D)
    for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
  }
}

template void embedding_forward<float>(const int64_t*, int64_t, const float*, int64_t, int64_t, float*);
template void embedding_forward<double>(const int64_t*, int64_t, const double*, int64_t, int64_t, double*);
template void embedding_backward<float>(const int64_t*, int64_t, const float*, int64_t, int64_t, float*);
template void embedding_backward<double>(const int64_t*, int64_t, const double*, int64_t, int64_t, double*);

}  // namespace parity
