// GPU twin of src/ops/cross_entropy.cpp.
//   Index check: the CPU throws at the first target (in row order) outside [0, V), after the
//   rows before it are done. A first kernel finds that row (integer atomicMax of n - i, so the
//   result does not depend on the launch); the other kernels do rows i < that one only, and
//   the host then throws check_index's message for targets[i].
//   forward:  one thread per row: losses[i] = logsumexp(row) - row[target] (row_logsumexp's
//             loops: max in v order, sum of exp in v order); then ONE thread sums losses in
//             row order from 0 (the CPU's total), copied back as the return value.
//   backward: one thread per row computes lse; one thread per (i, v) adds
//             scale * (exp(logits - lse) - [v == target]) to dlogits.
// exp and log are CUDA's (within 2 ulp), so losses and dlogits are close to, not bitwise
// equal to, the CPU's; the max, the order of every sum and the arithmetic are the same.
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"
#include "ops/scalar_math.h"

namespace parity::cuda {
namespace {

// Log-sum-exp of one row (V >= 1): max + log(sum_v exp(row[v] - max)), sum in v order.
template <class T>
__device__ T row_logsumexp(const T* row, int64_t V) {
  T mx = row[0];
  for (int64_t v = 1; v < V; ++v) mx = row[v] > mx ? row[v] : mx;
  T sum = T(0);
  for (int64_t v = 0; v < V; ++v) sum += dev_exp(row[v] - mx);
  return mx + dev_log(sum);
}

// losses (n), logits (n, V), targets (n): one thread per row.
template <class T>
__global__ void ce_losses_kernel(const T* logits, const int64_t* targets, int64_t n, int64_t V,
                                 const unsigned long long* first, T* losses) {
  const int64_t limit = n - static_cast<int64_t>(*first);
  for (int64_t i = thread_index(); i < limit; i += thread_count()) {
    const T* row = logits + i * V;  // (V)
    losses[i] = row_logsumexp(row, V) - row[targets[i]];
  }
}

// *total = sum of losses[0..limit) in row order; launched <<<1, 1>>>.
template <class T>
__global__ void ce_total_kernel(const T* losses, int64_t n, const unsigned long long* first, T* total) {
  const int64_t limit = n - static_cast<int64_t>(*first);
  T acc = T(0);
  for (int64_t i = 0; i < limit; ++i) acc += losses[i];
  *total = acc;
}

// lse (n): one thread per row.
template <class T>
__global__ void ce_lse_kernel(const T* logits, int64_t n, int64_t V, const unsigned long long* first, T* lse) {
  const int64_t limit = n - static_cast<int64_t>(*first);
  for (int64_t i = thread_index(); i < limit; i += thread_count()) lse[i] = row_logsumexp(logits + i * V, V);
}

// dlogits (n, V) += scale * (p - [v == target]), p = exp(logits - lse); one thread per element.
template <class T>
__global__ void ce_grad_kernel(const T* logits, const int64_t* targets, const T* lse, int64_t n, int64_t V,
                               T scale, const unsigned long long* first, T* dlogits) {
  const int64_t limit = n - static_cast<int64_t>(*first);
  for (int64_t e = thread_index(); e < limit * V; e += thread_count()) {
    const int64_t i = e / V, v = e % V;
    const T p = dev_exp(logits[e] - lse[i]);
    dlogits[e] += scale * (v == targets[i] ? p - T(1) : p);
  }
}

}  // namespace

// logits (n, V), targets (n), losses (n); returns sum_i losses[i] in row order.
template <class T>
T cross_entropy_forward(const T* logits, const int64_t* targets, int64_t n, int64_t V, T* losses) {
  if (n <= 0) return T(0);
  Stage st;
  const T* d_logits = stage_in(st, logits, n * V);  // V = 0: every target is out of range
  const int64_t* d_targets = st.in(targets, n);
  T* d_losses = st.out(losses, n);
  auto* first = st.scratch<unsigned long long>(1);
  T* d_total = st.scratch<T>(1);
  launch_first_bad(d_targets, n, V, first);
  st.launched("cross_entropy_forward");
  ce_losses_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d_logits, d_targets, n, V, first, d_losses);
  st.launched("cross_entropy_forward");
  ce_total_kernel<<<1, 1, 0, stream()>>>(d_losses, n, first, d_total);
  st.launched("cross_entropy_forward");
  st.finish();
  throw_first_bad(d_targets, n, V, first, "cross_entropy_forward: target");
  T total = T(0);
  check(cudaMemcpy(&total, d_total, sizeof total, cudaMemcpyDeviceToHost), "cross_entropy_forward");
  return total;
}

// logits (n, V), targets (n), dlogits (n, V) +=.
template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, int64_t n, int64_t V, T scale, T* dlogits) {
  if (n <= 0) return;
  Stage st;
  const T* d_logits = stage_in(st, logits, n * V);
  const int64_t* d_targets = st.in(targets, n);
  T* d_dlogits = n * V > 0 ? st.out(dlogits, n * V) : nullptr;
  auto* first = st.scratch<unsigned long long>(1);
  T* lse = st.scratch<T>(n);  // (n)
  launch_first_bad(d_targets, n, V, first);
  st.launched("cross_entropy_backward");
  if (V > 0) {
    ce_lse_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d_logits, n, V, first, lse);
    st.launched("cross_entropy_backward");
    ce_grad_kernel<<<blocks_for(n * V), kThreads, 0, stream()>>>(d_logits, d_targets, lse, n, V, scale, first,
                                                                 d_dlogits);
    st.launched("cross_entropy_backward");
  }
  st.finish();
  throw_first_bad(d_targets, n, V, first, "cross_entropy_backward: target");
}

template float cross_entropy_forward<float>(const float*, const int64_t*, int64_t, int64_t, float*);
template double cross_entropy_forward<double>(const double*, const int64_t*, int64_t, int64_t, double*);
template void cross_entropy_backward<float>(const float*, const int64_t*, int64_t, int64_t, float, float*);
template void cross_entropy_backward<double>(const double*, const int64_t*, int64_t, int64_t, double, double*);

}  // namespace parity::cuda
