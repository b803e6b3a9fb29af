#include "ops/cross_entropy.h"

#include "core/device.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#include <cmath>

#include "ops/scalar_math.h"

namespace parity {

namespace {

// Log-sum-exp of one row (V): max + log(sum_v exp(row[v] - max)), sum in v order.
template <class T>
T row_logsumexp(const T* row, int64_t V) {
  T mx = row[0];
  for (int64_t v = 1; v < V; ++v) mx = row[v] > mx ? row[v] : mx;
  T sum = T(0);
  for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
  return mx + std::log(sum);
}

}  // namespace

// losses[i] = logsumexp(logits[i]) - logits[i][targets[i]]; returns sum_i losses[i] in row order.
// logits (n, V), targets (n), losses (n). V must be >= 1 when n > 0.
template <class T>
T cross_entropy_forward(const T* logits, const int64_t* targets, int64_t n, int64_t V, T* losses) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::cross_entropy_forward(logits, targets, n, V, losses);
#endif
  T total = T(0);
  for (int64_t i = 0; i < n; ++i) {
    ops_detail::check_index(targets[i], V, "cross_entropy_forward: target");
    const T* row = logits + i * V;  // (V)
    losses[i] = row_logsumexp(row, V) - row[targets[i]];
    total += losses[i];
  }
  return total;
}

// dlogits[i][v] += scale * (exp(logits[i][v] - lse_i) - [v == target_i]).
template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, int64_t n, int64_t V, T scale, T* dlogits) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::cross_entropy_backward(logits, targets, n, V, scale, dlogits);
#endif
  for (int64_t i = 0; i < n; ++i) {
    ops_detail::check_index(targets[i], V, "cross_entropy_backward: target");
    const T* row = logits + i * V;  // (V)
    T* drow = dlogits + i * V;      // (V)
    const T lse = row_logsumexp(row, V);
    for (int64_t v = 0; v < V; ++v) {
      const T p = std::exp(row[v] - lse);
      drow[v] += scale * (v == targets[i] ? p - T(1) : p);
    }
  }
}

template float cross_entropy_forward<float>(const float*, const int64_t*, int64_t, int64_t, float*);
template double cross_entropy_forward<double>(const double*, const int64_t*, int64_t, int64_t, double*);
template void cross_entropy_backward<float>(const float*, const int64_t*, int64_t, int64_t, float, float*);
template void cross_entropy_backward<double>(const double*, const int64_t*, int64_t, int64_t, double, double*);

}  // namespace parity
