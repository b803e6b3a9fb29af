#include "parallel/tp_ops.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/inject.h"

namespace parity {

AmaxReduce fp8_amax_over(comm::Communicator* group) {
  static const bool bug = injected("fp8_amax_per_lane");
  if (group == nullptr || group->size() == 1 || bug) return {};
  return [group](std::span<float> amax) { group->allreduce(amax, comm::ReduceOp::max); };
}

template <class T> void tp_allreduce(const TpContext& c, Buffer<T>& buf) {
  if (c.size > 1) c.tp->allreduce(std::span<T>(buf), comm::ReduceOp::sum);
}

namespace {
// (b, S, W) <-> (tp, b, S/tp, W): chunk-major, so lane r's chunk is one contiguous block.
template <class T> Buffer<T> to_chunk_major(const Buffer<T>& x, int64_t tp, int64_t b, int64_t S, int64_t W) {
  Buffer<T> out(x.size());
  const int64_t Sl = S / tp;
  for (int64_t r = 0; r < tp; ++r)
    for (int64_t q = 0; q < b; ++q)
      std::copy_n(x.begin() + ((q * S + r * Sl) * W), Sl * W, out.begin() + (((r * b + q) * Sl) * W));
  return out;
}
template <class T> Buffer<T> from_chunk_major(const Buffer<T>& x, int64_t tp, int64_t b, int64_t S, int64_t W) {
  Buffer<T> out(x.size());
  const int64_t Sl = S / tp;
  for (int64_t r = 0; r < tp; ++r)
    for (int64_t q = 0; q < b; ++q)
      std::copy_n(x.begin() + (((r * b + q) * Sl) * W), Sl * W, out.begin() + ((q * S + r * Sl) * W));
  return out;
}
}  // namespace

template <class T>
Buffer<T> sp_gather(const TpContext& c, const Buffer<T>& local, int64_t b, int64_t S, int64_t W) {
  Buffer<T> cm(static_cast<size_t>(b * S * W));
  c.tp->allgather(std::span<const T>(local), std::span<T>(cm));
  return from_chunk_major(cm, c.size, b, S, W);
}

template <class T>
Buffer<T> sp_reduce_scatter(const TpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W) {
  Buffer<T> cm = to_chunk_major(full, c.size, b, S, W);
  Buffer<T> out(static_cast<size_t>(b * (S / c.size) * W));
  c.tp->reduce_scatter(std::span<const T>(cm), std::span<T>(out), comm::ReduceOp::sum);
  return out;
}

template <class T>
Buffer<T> sp_slice(const TpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W) {
  Buffer<T> cm = to_chunk_major(full, c.size, b, S, W);
  const auto n = static_cast<size_t>(b * (S / c.size) * W);
  return Buffer<T>(cm.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(c.rank)),
                        cm.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(c.rank + 1)));
}

template <class T>
Buffer<T> tp_to_full(const TpContext& c, const Buffer<T>& res, int64_t b, int64_t S, int64_t W) {
  return c.sp && c.size > 1 ? sp_gather(c, res, b, S, W) : res;
}

template <class T> Buffer<T> tp_sum_to_res(const TpContext& c, Buffer<T> full, int64_t b, int64_t S, int64_t W) {
  if (c.sp && c.size > 1) return sp_reduce_scatter(c, full, b, S, W);
  tp_allreduce(c, full);
  return full;
}

template <class T>
void vp_embedding_forward(const int64_t* ids, int64_t n, const T* table, int64_t v0, int64_t Vl, int64_t D, T* out) {
  for (int64_t t = 0; t < n; ++t) {
    const int64_t row = ids[t] - v0;
    for (int64_t d = 0; d < D; ++d) out[t * D + d] = (row >= 0 && row < Vl) ? table[row * D + d] : T(0);
  }
}

template <class T>
void vp_embedding_backward(const int64_t* ids, int64_t n, const T* dout, int64_t v0, int64_t Vl, int64_t D, T* dtable) {
  for (int64_t t = 0; t < n; ++t) {
    const int64_t row = ids[t] - v0;
    if (row < 0 || row >= Vl) continue;
    for (int64_t d = 0; d < D; ++d) dtable[row * D + d] += dout[t * D + d];
  }
}

template <class T>
double vp_cross_entropy_forward(const TpContext& c, const T* logits, const int64_t* targets, int64_t n, int64_t v0,
                                int64_t Vl, VpCeCache<T>& cache) {
  // Per row, this lane's [max m | sum of exp(x - m) | target logit, 0 if not here] (3, n),
  // all-gathered over TP in one collective; then M = max over lanes, sum_exp = sum over
  // lanes in lane order of s_l * exp(m_l - M), the target logit from the lane holding it.
  // (Two all-reduces, max then sums, give the same function with one more latency.)
  const auto N = static_cast<size_t>(n);
  Buffer<T> mine(3 * N, T(0));
  for (size_t t = 0; t < N; ++t) {
    const T* row = logits + static_cast<int64_t>(t) * Vl;
    T m = T(-INFINITY), s = T(0);
    for (int64_t j = 0; j < Vl; ++j) m = std::max(m, row[j]);
    if (Vl > 0)
      for (int64_t j = 0; j < Vl; ++j) s += std::exp(row[j] - m);
    mine[t] = m, mine[N + t] = s;
    const int64_t col = targets[t] - v0;
    if (col >= 0 && col < Vl) mine[2 * N + t] = row[col];
  }
  Buffer<T> all = mine;
  if (c.size > 1) {
    all.resize(mine.size() * static_cast<size_t>(c.size));
    c.tp->allgather(std::span<const T>(mine), std::span<T>(all));
  }
  cache.row_max.assign(N, T(-INFINITY));
  cache.sum_exp.assign(N, T(0));
  double total = 0;
  // bug zoo (core/inject.h): the max taken over the wrong group (this lane alone), so each
  // lane's sum of exponentials is shifted by its own max and the sums are added unscaled
  static const bool max_bug = injected("vocab_ce_max_wrong_group");
  for (size_t t = 0; t < N; ++t) {
    T M = T(-INFINITY), S = T(0), target = T(0);
    for (size_t l = 0; l < all.size(); l += 3 * N) M = std::max(M, all[l + t]);
    if (max_bug) M = mine[t];
    for (size_t l = 0; l < all.size(); l += 3 * N) {
      if (all[l + N + t] > T(0)) S += all[l + N + t] * (max_bug ? T(1) : std::exp(all[l + t] - M));
      target += all[l + 2 * N + t];
    }
    cache.row_max[t] = M, cache.sum_exp[t] = S;
    total += static_cast<double>(std::log(S) + M - target);
  }
  return total;
}

template <class T>
void vp_cross_entropy_backward(const T* logits, const int64_t* targets, int64_t n, int64_t v0, int64_t Vl, T scale,
                               const VpCeCache<T>& cache, T* dlogits) {
  for (int64_t t = 0; t < n; ++t) {
    const T m = cache.row_max[static_cast<size_t>(t)], z = cache.sum_exp[static_cast<size_t>(t)];
    for (int64_t j = 0; j < Vl; ++j) {
      T p = std::exp(logits[t * Vl + j] - m) / z;
      if (targets[t] - v0 == j) p -= T(1);
      dlogits[t * Vl + j] += scale * p;
    }
  }
}

template Buffer<int64_t> sp_gather<int64_t>(const TpContext&, const Buffer<int64_t>&, int64_t, int64_t, int64_t);
template Buffer<int64_t> tp_to_full<int64_t>(const TpContext&, const Buffer<int64_t>&, int64_t, int64_t, int64_t);
template Buffer<int64_t> sp_slice<int64_t>(const TpContext&, const Buffer<int64_t>&, int64_t, int64_t, int64_t);

#define PARITY_INSTANTIATE(T)                                                                                       \
  template void tp_allreduce<T>(const TpContext&, Buffer<T>&);                                                 \
  template Buffer<T> sp_gather<T>(const TpContext&, const Buffer<T>&, int64_t, int64_t, int64_t);         \
  template Buffer<T> tp_to_full<T>(const TpContext&, const Buffer<T>&, int64_t, int64_t, int64_t);        \
  template Buffer<T> tp_sum_to_res<T>(const TpContext&, Buffer<T>, int64_t, int64_t, int64_t);            \
  template Buffer<T> sp_reduce_scatter<T>(const TpContext&, const Buffer<T>&, int64_t, int64_t, int64_t); \
  template Buffer<T> sp_slice<T>(const TpContext&, const Buffer<T>&, int64_t, int64_t, int64_t);          \
  template void vp_embedding_forward<T>(const int64_t*, int64_t, const T*, int64_t, int64_t, int64_t, T*);          \
  template void vp_embedding_backward<T>(const int64_t*, int64_t, const T*, int64_t, int64_t, int64_t, T*);         \
  template double vp_cross_entropy_forward<T>(const TpContext&, const T*, const int64_t*, int64_t, int64_t, int64_t, \
                                              VpCeCache<T>&);                                                        \
  template void vp_cross_entropy_backward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, T,                 \
                                             const VpCeCache<T>&, T*);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
