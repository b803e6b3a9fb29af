#include "parallel/ep_dispatch.h"

#include "core/fp8_delayed.h"
#include "core/inject.h"
#include "parallel/tp_ops.h"
#include "ops/elementwise.h"

#include <algorithm>
#include <chrono>
#include <span>

namespace parity {

DispatchStats& dispatch_stats() {
  thread_local DispatchStats s;  // per thread: a rank of a simulated world (--backend sim) is one
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

int64_t total(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// Rows this flow moves off the rank one way (EP alltoallv to others, ETP allgather from
// others) and the floor: each token once per other EP rank it must reach.
template <class T>
void count_flow(const EpContext& ep, DispatchCache<T>& k, const int64_t* chosen, int64_t n, int64_t K) {
  const int64_t me = ep.ep->rank();
  int64_t moved = 0, floor = 0;
  for (size_t j = 0; j < k.send_rows.size(); ++j)
    if (static_cast<int64_t>(j) != me) moved += k.send_rows[j];
  if (ep.etp->size() > 1) moved += total(k.lane_rows) - k.lane_rows[static_cast<size_t>(ep.etp->rank())];
  std::vector<char> seen(k.send_rows.size());
  for (int64_t t = 0; t < n; ++t) {
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t s = 0; s < K; ++s) {
      const auto dest = static_cast<size_t>(chosen[t * K + s] / ep.El);
      if (static_cast<int64_t>(dest) != me && !seen[dest]) seen[dest] = 1, ++floor;
    }
  }
  k.rows_moved = 2 * moved, k.rows_floor = 2 * floor;  // there and back
  dispatch_stats().rows_moved += k.rows_moved;
  dispatch_stats().rows_floor += k.rows_floor;
}

std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t D) {
  std::vector<int64_t> out(rows);
  for (auto& x : out) x *= D;
  return out;
}


// alltoallv of rows (D elements each).
template <class T>
Buffer<T> exchange(comm::Communicator& g, const Buffer<T>& in, const std::vector<int64_t>& send_rows,
                        const std::vector<int64_t>& recv_rows, int64_t D) {
  Buffer<T> out(static_cast<size_t>(total(recv_rows) * D));
  if (g.size() == 1) return in;
  auto sc = times(send_rows, D), rc = times(recv_rows, D);
  g.alltoallv(std::span<const T>(in), std::span<const int64_t>(sc), std::span<T>(out), std::span<const int64_t>(rc));
  return out;
}

template <class T>
Buffer<T> lane_gather(comm::Communicator& g, const Buffer<T>& mine, const std::vector<int64_t>& lane_rows,
                           int64_t D) {
  if (g.size() == 1) return mine;
  Buffer<T> out(static_cast<size_t>(total(lane_rows) * D));
  auto counts = times(lane_rows, D);
  g.allgatherv(std::span<const T>(mine), std::span<T>(out), std::span<const int64_t>(counts));
  return out;
}

template <class T>
Buffer<T> lane_reduce_scatter(comm::Communicator& g, const Buffer<T>& all,
                                   const std::vector<int64_t>& lane_rows, int64_t D) {
  if (g.size() == 1) return all;
  Buffer<T> out(static_cast<size_t>(lane_rows[static_cast<size_t>(g.rank())] * D));
  auto counts = times(lane_rows, D);
  g.reduce_scatterv(std::span<const T>(all), std::span<T>(out), std::span<const int64_t>(counts), comm::ReduceOp::sum);
  return out;
}

// The bug zoo's alltoallv_counts_off_by_one: the split between the first two EP peers that
// both get rows is off by one, so the last row meant for one peer's experts is sent to the
// next peer's first expert (sender and receiver agree, so the exchange itself succeeds).
void off_by_one(std::vector<int64_t>& counts, int64_t El) {
  for (size_t b = static_cast<size_t>(El); b < counts.size(); b += static_cast<size_t>(El))
    if (counts[b - 1] > 0) {
      --counts[b - 1], ++counts[b];
      return;
    }
}

// The routing metadata: rows per EP peer and lane, and the grouping by local expert of
// the ETP-gathered buffer (ordered lane, source, expert).
template <class T> void plan(const EpContext& ep, DispatchCache<T>& k) {
  const int64_t P = ep.ep->size(), L = ep.etp->size(), El = ep.El;
  std::vector<int64_t> counts = k.perm.counts;  // rows per expert, in the order they are sent
  if (P > 1 && injected("alltoallv_counts_off_by_one")) off_by_one(counts, El);  // bug zoo (core/inject.h)
  k.send_rows.assign(static_cast<size_t>(P), 0);
  for (int64_t e = 0; e < ep.E; ++e) k.send_rows[static_cast<size_t>(e / El)] += counts[static_cast<size_t>(e)];
  k.recv_expert_rows.assign(static_cast<size_t>(P * El), 0);
  if (P == 1)
    k.recv_expert_rows = counts;
  else
    ep.ep->alltoall(std::span<const int64_t>(counts), std::span<int64_t>(k.recv_expert_rows));
  k.recv_rows.assign(static_cast<size_t>(P), 0);
  for (int64_t s = 0; s < P; ++s)
    for (int64_t e = 0; e < El; ++e)
      k.recv_rows[static_cast<size_t>(s)] += k.recv_expert_rows[static_cast<size_t>(s * El + e)];
  std::vector<int64_t> mine{total(k.recv_rows)};
  k.lane_rows = mine, k.lane_expert_rows = k.recv_expert_rows;
  if (L > 1) {
    k.lane_rows.assign(static_cast<size_t>(L), 0);
    ep.etp->allgather(std::span<const int64_t>(mine), std::span<int64_t>(k.lane_rows));
    k.lane_expert_rows.assign(static_cast<size_t>(L * P * El), 0);
    ep.etp->allgather(std::span<const int64_t>(k.recv_expert_rows), std::span<int64_t>(k.lane_expert_rows));
  }
  // block start of (lane, source, expert) in the gathered buffer
  std::vector<int64_t> start(static_cast<size_t>(L * P * El));
  for (int64_t i = 0, row = 0; i < L * P * El; ++i)
    start[static_cast<size_t>(i)] = row, row += k.lane_expert_rows[static_cast<size_t>(i)];
  k.order.clear();
  k.expert_rows.assign(static_cast<size_t>(El), 0);
  for (int64_t e = 0; e < El; ++e)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t s = 0; s < P; ++s) {
        const auto blk = static_cast<size_t>((l * P + s) * El + e);
        for (int64_t r = 0; r < k.lane_expert_rows[blk]; ++r) k.order.push_back(start[blk] + r);
        k.expert_rows[static_cast<size_t>(e)] += k.lane_expert_rows[blk];
      }
}

template <class T> Buffer<T> take_rows(const Buffer<T>& x, const std::vector<int64_t>& order, int64_t D) {
  Buffer<T> out(order.size() * static_cast<size_t>(D));
  for (size_t i = 0; i < order.size(); ++i)
    std::copy_n(x.begin() + order[i] * D, D, out.begin() + static_cast<std::ptrdiff_t>(i) * D);
  return out;
}

template <class T> Buffer<T> put_rows(const Buffer<T>& x, const std::vector<int64_t>& order, int64_t D) {
  Buffer<T> out(order.size() * static_cast<size_t>(D));
  for (size_t i = 0; i < order.size(); ++i)
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(i) * D, D, out.begin() + order[i] * D);
  return out;
}

}  // namespace

template <class T>
void ep_dispatch_forward(const ModelConfig& c, const EpContext& ep, const ExpertShard<T>& w, const T* x,
                         const int64_t* chosen, int64_t n, DispatchCache<T>& k) {
  const int64_t D = c.dim, K = c.top_k, F = w.Fl;
  const auto t0 = Clock::now();
  k.perm = make_permutation(chosen, n, ep.E, K);
  k.xg = zeros<T>(n * K * D);
  permute_forward(x, D, k.perm, k.xg.data());
  plan(ep, k);
  count_flow(ep, k, chosen, n, K);
  Buffer<T> recv = exchange(*ep.ep, k.xg, k.send_rows, k.recv_rows, D);
  k.xe = take_rows(lane_gather(*ep.etp, recv, k.lane_rows, D), k.order, D);
  auto ye = zeros<T>(static_cast<int64_t>(k.order.size()) * D);
  k.ffn.assign(static_cast<size_t>(ep.El), {});
  const AmaxReduce etp_amax = fp8_amax_over(ep.etp);  // fp8: an expert's rows split over F by ETP
  const Fp8SplitScope split(etp_amax ? &etp_amax : nullptr);
  for (int64_t e = 0, row = 0; e < ep.El; row += k.expert_rows[static_cast<size_t>(e)], ++e) {
    const Fp8SiteScope expert(ep.e0 + e);  // fp8-delayed: the expert's slots (global index)
    ffn_forward(k.xe.data() + row * D, k.expert_rows[static_cast<size_t>(e)], D, F, w.w1 + e * D * F,
                w.w3 + e * D * F, w.w2 + e * F * D, ye.data() + row * D, k.ffn[static_cast<size_t>(e)]);
  }
  Buffer<T> mine = lane_reduce_scatter(*ep.etp, put_rows(ye, k.order, D), k.lane_rows, D);
  Buffer<T> yg = exchange(*ep.ep, mine, k.recv_rows, k.send_rows, D);
  k.y = zeros<T>(n * K * D);
  unpermute_forward(yg.data(), D, k.perm, k.y.data());
  dispatch_stats().seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  ++dispatch_stats().calls;
}

template <class T>
void ep_dispatch_backward(const ModelConfig& c, const EpContext& ep, const ExpertShard<T>& w, const T* dy, int64_t n,
                          const DispatchCache<T>& k, T* dx, T* dw1, T* dw3, T* dw2) {
  const int64_t D = c.dim, K = c.top_k, F = w.Fl;
  const auto t0 = Clock::now();
  auto dyg = zeros<T>(n * K * D);
  unpermute_backward(dy, D, k.perm, dyg.data());
  Buffer<T> drecv = exchange(*ep.ep, dyg, k.send_rows, k.recv_rows, D);
  Buffer<T> dye = take_rows(lane_gather(*ep.etp, drecv, k.lane_rows, D), k.order, D);
  auto dxe = zeros<T>(static_cast<int64_t>(k.order.size()) * D);
  const AmaxReduce etp_amax = fp8_amax_over(ep.etp);  // fp8: as the forward's
  const Fp8SplitScope split(etp_amax ? &etp_amax : nullptr);
  for (int64_t e = 0, row = 0; e < ep.El; row += k.expert_rows[static_cast<size_t>(e)], ++e) {
    const Fp8SiteScope expert(ep.e0 + e);  // fp8-delayed: the expert's slots (global index)
    ffn_backward(k.xe.data() + row * D, k.expert_rows[static_cast<size_t>(e)], D, F, w.w1 + e * D * F,
                 w.w3 + e * D * F, w.w2 + e * F * D, k.ffn[static_cast<size_t>(e)], dye.data() + row * D,
                 dxe.data() + row * D, dw1 + e * D * F, dw3 + e * D * F, dw2 + e * F * D);
  }
  Buffer<T> dmine = lane_reduce_scatter(*ep.etp, put_rows(dxe, k.order, D), k.lane_rows, D);
  Buffer<T> dxg = exchange(*ep.ep, dmine, k.recv_rows, k.send_rows, D);
  permute_backward(dxg.data(), D, k.perm, dx);
  DispatchStats& st = dispatch_stats();
  st.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  st.rows_moved += k.rows_moved;  // the backward moves the same rows
  st.rows_floor += k.rows_floor;
}

#define PARITY_INSTANTIATE(T)                                                                                   \
  template void ep_dispatch_forward<T>(const ModelConfig&, const EpContext&, const ExpertShard<T>&, const T*,   \
                                       const int64_t*, int64_t, DispatchCache<T>&);                             \
  template void ep_dispatch_backward<T>(const ModelConfig&, const EpContext&, const ExpertShard<T>&, const T*,  \
                                        int64_t, const DispatchCache<T>&, T*, T*, T*, T*);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
