// GPU twin of src/ops/embedding.cpp.
//   Index check: the CPU throws at the first id (in token order) outside [0, V), after the
//   tokens before it are done. A first kernel finds that token (integer atomicMax of n - t,
//   so the result does not depend on the launch); the main kernel does tokens t < that one
//   only, and the host then throws check_index's message for ids[t].
//   forward:  one thread per element (t, d) of out: out[t][d] = table[ids[t]][d].
//   backward: one thread per element (v, d) of dtable, looping over tokens in order and
//             adding dout[t][d] for each ids[t] == v straight into the element (the CPU's
//             scatter: the same adds, in the same order). O(n) per thread, no atomics.
// No exp/log: results match the CPU bitwise.
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"
#include "ops/scalar_math.h"

namespace parity::cuda {
namespace {

// out (n, D), table (V, D), ids (n): tokens before the first bad one only.
template <class T>
__global__ void embedding_forward_kernel(const int64_t* ids, int64_t n, const T* table, int64_t D,
                                         const unsigned long long* first, T* out) {
  const int64_t limit = n - static_cast<int64_t>(*first);
  for (int64_t e = thread_index(); e < limit * D; e += thread_count()) {
    const int64_t t = e / D, d = e % D;
    out[e] = table[ids[t] * D + d];
  }
}

// dtable (V, D) element (v, d) += dout[t][d] for each token t with ids[t] == v, in token order.
// rows (V + 1) and tokens (n): the tokens of id v are tokens[rows[v] .. rows[v+1]), ascending
// (a counting sort made on the host), so each thread visits only its own tokens.
template <class T>
__global__ void embedding_backward_kernel(const int64_t* rows, const int64_t* tokens, int64_t n, const T* dout,
                                          int64_t V, int64_t D, const unsigned long long* first, T* dtable) {
  const int64_t limit = n - static_cast<int64_t>(*first);
  for (int64_t e = thread_index(); e < V * D; e += thread_count()) {
    const int64_t v = e / D, d = e % D;
    T acc = dtable[e];
    for (int64_t i = rows[v]; i < rows[v + 1]; ++i) {
      const int64_t t = tokens[i];
      if (t >= limit) break;  // tokens ascend: the rest come after the first bad id
      acc += dout[t * D + d];
    }
    dtable[e] = acc;
  }
}

// Counting sort of the tokens by id (ids outside [0, V) are left out; the kernel stops at
// the first of them anyway). rows (V + 1), tokens (n).
void group_tokens(const int64_t* ids, int64_t n, int64_t V, std::vector<int64_t>& rows,
                  std::vector<int64_t>& tokens) {
  std::vector<int64_t> host(static_cast<size_t>(n));
  check(cudaMemcpy(host.data(), ids, static_cast<size_t>(n) * sizeof(int64_t), cudaMemcpyDefault),
        "embedding_backward: ids");
  rows.assign(static_cast<size_t>(V + 1), 0);
  for (int64_t id : host)
    if (id >= 0 && id < V) ++rows[static_cast<size_t>(id + 1)];
  for (int64_t v = 0; v < V; ++v) rows[static_cast<size_t>(v + 1)] += rows[static_cast<size_t>(v)];
  tokens.assign(static_cast<size_t>(n), 0);
  std::vector<int64_t> next(rows.begin(), rows.end() - 1);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t id = host[static_cast<size_t>(t)];
    if (id >= 0 && id < V) tokens[static_cast<size_t>(next[static_cast<size_t>(id)]++)] = t;
  }
}

}  // namespace

// ids (n), table (V, D), out (n, D).
template <class T>
void embedding_forward(const int64_t* ids, int64_t n, const T* table, int64_t V, int64_t D, T* out) {
  if (n <= 0) return;  // D = 0 still checks the ids
  Stage st;
  const int64_t* d_ids = st.in(ids, n);
  const T* d_table = stage_in(st, table, V * D);
  T* d_out = stage_out(st, out, n * D);
  auto* first = st.scratch<unsigned long long>(1);
  launch_first_bad(d_ids, n, V, first);
  st.launched("embedding_forward");
  if (D > 0) {
    embedding_forward_kernel<<<blocks_for(n * D), kThreads, 0, stream()>>>(d_ids, n, d_table, D, first, d_out);
    st.launched("embedding_forward");
  }
  st.finish();
  throw_first_bad(d_ids, n, V, first, "embedding_forward: id");
}

// ids (n), dout (n, D), dtable (V, D) +=.
template <class T>
void embedding_backward(const int64_t* ids, int64_t n, const T* dout, int64_t V, int64_t D, T* dtable) {
  if (n <= 0) return;
  Stage st;
  const int64_t* d_ids = st.in(ids, n);
  const T* d_dout = stage_in(st, dout, n * D);
  T* d_dtable = stage_out(st, dtable, V * D);
  auto* first = st.scratch<unsigned long long>(1);
  launch_first_bad(d_ids, n, V, first);
  st.launched("embedding_backward");
  if (V * D > 0) {
    std::vector<int64_t> rows, tokens;
    group_tokens(ids, n, V, rows, tokens);
    const int64_t* d_rows = st.in(rows.data(), V + 1);
    const int64_t* d_tokens = st.in(tokens.data(), n);
    embedding_backward_kernel<<<blocks_for(V * D), kThreads, 0, stream()>>>(d_rows, d_tokens, n, d_dout, V, D,
                                                                            first, d_dtable);
    st.launched("embedding_backward");
  }
  st.finish();
  throw_first_bad(d_ids, n, V, first, "embedding_backward: id");
}

template void embedding_forward<float>(const int64_t*, int64_t, const float*, int64_t, int64_t, float*);
template void embedding_forward<double>(const int64_t*, int64_t, const double*, int64_t, int64_t, double*);
template void embedding_backward<float>(const int64_t*, int64_t, const float*, int64_t, int64_t, float*);
template void embedding_backward<double>(const int64_t*, int64_t, const double*, int64_t, int64_t, double*);

}  // namespace parity::cuda
