#include "parallel/pmoe.h"

#include <optional>

#include "core/fp8_delayed.h"

#include "core/precision.h"

#include "core/inject.h"
#include "ops/elementwise.h"

#include <span>

#include "mesh/placement.h"
#include "ops/aux_loss.h"
#include "ops/matmul.h"
#include "ops/router.h"
#include "model/trace.h"

namespace parity {

namespace {
// The aux loss is averaged over the whole batch (MODEL.md), not over one micro-batch: the
// bug zoo's aux_coef_per_microbatch (core/inject.h) divides by the micro-batch instead.
double aux_batch(const ModelConfig& c) {
  static const bool bug = injected("aux_coef_per_microbatch");
  return static_cast<double>(bug ? c.batch / c.microbatches : c.batch);
}
}  // namespace

namespace {

bool split_copies(const TpContext& tp) { return tp.size > 1 && !tp.sp; }

// The bug zoo's aux_stats_per_lane (core/inject.h): under SP, the balance statistics of each
// lane's own sequence chunks instead of the whole sequences gathered over TP.
bool aux_per_lane(const TpContext& tp) {
  static const bool bug = injected("aux_stats_per_lane");
  return bug && tp.sp && tp.size > 1;
}

// This lane's rows of the (n, W) replicated view -> all rows (allgatherv over TP), or the
// SP gather; identity for tp 1.
template <class T>
Buffer<T> gather_dispatch(const TpContext& tp, const Buffer<T>& mine, int64_t n, int64_t b, int64_t S, int64_t W) {
  if (tp.size == 1) return mine;
  if (tp.sp) return sp_gather(tp, mine, b, S, W);
  std::vector<int64_t> counts;
  for (int64_t i = 0; i < tp.size; ++i) counts.push_back(mesh::chunk(n, tp.size, i).size() * W);
  Buffer<T> out(static_cast<size_t>(n * W));
  tp.tp->allgatherv(std::span<const T>(mine), std::span<T>(out), std::span<const int64_t>(counts));
  return out;
}

template <class T>
Buffer<T> slice_dispatch(const TpContext& tp, const Buffer<T>& full, int64_t t0, int64_t t1, int64_t b,
                              int64_t S, int64_t W) {
  if (tp.size > 1 && tp.sp) return sp_slice(tp, full, b, S, W);
  return Buffer<T>(full.begin() + t0 * W, full.begin() + t1 * W);
}

// The bug zoo's aux_stats_per_cp_chunk (core/inject.h): under context parallel the balance
// statistics of each rank's own sequence chunk instead of the whole sequences gathered over cp.
bool aux_per_cp_chunk(const CpContext& cp) {
  static const bool bug = injected("aux_stats_per_cp_chunk");
  return bug && cp.size > 1;
}

// The sequence-wise balance loss over whole sequences (MODEL.md: per-sequence f_e and p_e).
// k.s_full, k.chosen_full hold this rank's chunk (b, S, .) of every sequence, gathered over
// TP; under context parallel they are gathered over cp as well (exact copies, so the sums
// run in the baseline's order) and every cp rank computes the same whole-sequence loss,
// which only cp rank 0 reports: the loss is summed over dense DP, which holds the cp ranks.
template <class T> double aux_whole_sequences(const ModelConfig& c, const CpContext& cp, PMoeCache<T>& k, int64_t b) {
  const int64_t E = c.experts, K = c.top_k;
  const bool gather = cp.size > 1 && !aux_per_cp_chunk(cp);
  const int64_t L = gather ? c.seq * cp.size : c.seq;  // tokens per sequence in the statistics
  if (gather) {
    k.s_full = cp_gather(cp, k.s_full, b, L, E);
    k.chosen_full = cp_gather(cp, k.chosen_full, b, L, K);
  }
  double aux = 0;
  for (int64_t q = 0; q < b; ++q)
    aux +=
        c.aux_alpha / aux_batch(c) *
        static_cast<double>(aux_loss_forward(k.s_full.data() + q * L * E, k.chosen_full.data() + q * L * K, L, E, K));
  return gather && cp.rank != 0 ? 0.0 : aux;
}

// The aux loss's score gradient of this rank's chunk (b, S, E) of every sequence.
template <class T> Buffer<T> aux_whole_sequences_backward(const ModelConfig& c, const CpContext& cp,
                                                          const PMoeCache<T>& k, int64_t b) {
  const int64_t E = c.experts, K = c.top_k;
  const bool gather = cp.size > 1 && !aux_per_cp_chunk(cp);
  const int64_t L = gather ? c.seq * cp.size : c.seq;
  auto ds_full = zeros<T>(b * L * E);  // identical on every lane and cp rank; each keeps its rows
  const T coef = static_cast<T>(c.aux_alpha / aux_batch(c) * current_loss_scale());  // fp16: the loss scale
  for (int64_t q = 0; q < b; ++q)
    aux_loss_backward(k.s_full.data() + q * L * E, k.chosen_full.data() + q * L * K, L, E, K, coef,
                      ds_full.data() + q * L * E);
  return gather ? cp_slice(cp, ds_full, b, L, E) : ds_full;
}

// The bug zoo's combine_weights_twice_ep (core/inject.h): on EP rank 1 the combine weights the experts'
// outputs by w·w, the routing weights applied twice, in the forward only (the backward's are right).
bool combine_twice(const EpContext& ep) {
  static const bool bug = injected("combine_weights_twice_ep");
  return bug && ep.ep->size() > 1 && ep.ep->rank() == 1;
}

// The global token id of each routed row [t0, t1) of this rank (ParallelRun::report_tokens
// names the same ones): c.seq is this rank's chunk of each sequence.
template <class T>
std::vector<int64_t> routed_token_ids(const ModelConfig& c, const TpContext& tp, const CpContext& cp,
                                      const PMoeCache<T>& k, int64_t g0) {
  const int64_t S = c.seq * cp.size, Sc = c.seq;
  const bool split = tp.sp && tp.size > 1;
  const int64_t Sl = split ? Sc / tp.size : Sc, lane0 = split ? tp.rank * Sl : 0;  // this lane's first chunk row
  std::vector<int64_t> ids;
  for (int64_t t = k.t0; t < k.t1; ++t) ids.push_back((g0 + t / Sl) * S + cp.position(S, lane0 + t % Sl));
  return ids;
}

// A traced tensor of the block (model/trace.h) on this rank's routed rows: without sequence parallel a
// tp lane's rows are chunk(n, tp, lane) of the copies (flat over the sequences), else its own stream.
template <class T>
void rec(const ModelConfig& c, const TpContext& tp, const PMoeWeights<T>& wt, const PMoeCache<T>& k, trace::Site s,
         trace::Dir d, const T* x, int64_t cols) {
  const int64_t l = wt.follow.layer + c.dense_layers, n_d = k.t1 - k.t0;
  if (split_copies(tp))
    trace::record_routed(s, l, d, x, n_d, cols, k.t0);
  else
    trace::record(s, l, d, x, n_d, cols);
}

template <class T>
void route(const ModelConfig& c, const TpContext& tp, const PMoeWeights<T>& wt, PMoeCache<T>& k, int64_t n_d,
           const int64_t* ids) {
  using trace::Dir, trace::Site;
  const int64_t D = c.dim, E = c.experts, K = c.top_k;
  k.logits = zeros<T>(n_d * E), k.s = zeros<T>(n_d * E), k.w = zeros<T>(n_d * K);
  matmul_forward(k.x_d.data(), wt.gate, k.logits.data(), n_d, D, E);
  storage_point(k.logits.data(), n_d * E);  // a storage point (core/precision.h); scores in the compute dtype
  rec(c, tp, wt, k, Site::router, Dir::fwd, k.logits.data(), E);
  router_scores_forward(k.logits.data(), n_d, E, c.score, k.s.data());
  rec(c, tp, wt, k, Site::scores, Dir::fwd, k.s.data(), E);
  k.chosen.assign(static_cast<size_t>(n_d * K), 0);
  topk_select(k.s.data(), wt.bias, n_d, E, K, k.chosen.data());
  k.followed = ids != nullptr ? follow_baseline_routes(wt.follow, ids, n_d, K, E, k.chosen.data()) : 0;
  route_weights_forward(k.s.data(), k.chosen.data(), n_d, E, K, c.route_norm, c.route_scale, k.w.data());
  rec(c, tp, wt, k, Site::route_w, Dir::fwd, k.w.data(), K);
}

}  // namespace

template <class T>
void pmoe_forward(const ModelConfig& c, const TpContext& tp, const CpContext& cp, const EpContext& ep,
                  const PMoeWeights<T>& wt, const Buffer<T>& x_res, int64_t b, Buffer<T>& out_res, PMoeCache<T>& k) {
  const int64_t D = c.dim, E = c.experts, K = c.top_k, S = c.seq, n = b * S;
  const int64_t n_res = static_cast<int64_t>(x_res.size()) / D;
  mesh::Range mine = split_copies(tp) ? mesh::chunk(n, tp.size, tp.rank) : mesh::Range{0, n_res};
  k.t0 = mine.begin, k.t1 = mine.end;
  const int64_t n_d = mine.size();
  k.x_d.assign(x_res.begin() + k.t0 * D, x_res.begin() + k.t1 * D);
  const std::vector<int64_t> ids =
      wt.follow.oracle != nullptr ? routed_token_ids(c, tp, cp, k, wt.follow.first) : std::vector<int64_t>{};
  route(c, tp, wt, k, n_d, ids.empty() ? nullptr : ids.data());
  k.aux = 0;
  if (c.aux_alpha > 0 && aux_per_lane(tp)) {  // bug zoo: this lane's sequence chunks only
    const int64_t Sl = S / tp.size;
    for (int64_t q = 0; q < b; ++q)
      k.aux += c.aux_alpha / aux_batch(c) *
               static_cast<double>(aux_loss_forward(k.s.data() + q * Sl * E, k.chosen.data() + q * Sl * K, Sl, E, K));
  } else if (c.aux_alpha > 0) {
    k.s_full = gather_dispatch(tp, k.s, n, b, S, E);
    k.chosen_full = gather_dispatch(tp, k.chosen, n, b, S, K);
    k.aux = aux_whole_sequences(c, cp, k, b);
  }
  std::optional<Fp8SiteScope> site(std::in_place, wt.follow.layer + c.dense_layers, "moe.experts");  // fp8-delayed
  ep_dispatch_forward(c, ep, wt.experts, k.x_d.data(), k.chosen.data(), n_d, k.dispatch);
  site.reset();
  rec(c, tp, wt, k, trace::Site::experts, trace::Dir::fwd, k.dispatch.y.data(), K * D);  // at (token, slot)
  auto out_d = zeros<T>(n_d * D);
  Buffer<T> twice;  // bug zoo only
  if (combine_twice(ep)) {
    twice = k.w;
    for (size_t i = 0; i < twice.size(); ++i) twice[i] *= k.w[i];
  }
  combine_forward(k.dispatch.y.data(), twice.empty() ? k.w.data() : twice.data(), n_d, K, D, out_d.data());
  rec(c, tp, wt, k, trace::Site::combine, trace::Dir::fwd, out_d.data(), D);
  out_res = split_copies(tp) ? gather_dispatch(tp, out_d, n, b, S, D) : out_d;
  if (c.shared_experts > 0) {
    k.x_full = tp_to_full(tp, x_res, b, S, D);
    auto part = zeros<T>(n * D);
    const Fp8SiteScope shared_site(wt.follow.layer + c.dense_layers, "moe.shared");  // fp8-delayed
    ffn_forward(k.x_full.data(), n, D, wt.Fsl, wt.sw1, wt.sw3, wt.sw2, part.data(), k.shared);
    const Buffer<T> shared = tp_sum_to_res(tp, std::move(part), b, S, D);  // the lanes' partial sums, reduced
    trace::record(trace::Site::shared, wt.follow.layer + c.dense_layers, trace::Dir::fwd, shared.data(),
                  static_cast<int64_t>(shared.size()) / D, D);
    add_into(out_res, shared);
  }
}

template <class T> void pmoe_backward(const ModelConfig& c, const TpContext& tp, const CpContext& cp,
                                      const EpContext& ep, const PMoeWeights<T>& wt, int64_t b, const PMoeCache<T>& k,
                                      const Buffer<T>& dout_res, Buffer<T>& dx_res, const PMoeGrads<T>& g) {
  const int64_t D = c.dim, E = c.experts, K = c.top_k, S = c.seq, n = b * S, n_d = k.t1 - k.t0;
  if (c.shared_experts > 0) {
    Buffer<T> dout = tp_to_full(tp, dout_res, b, S, D);
    auto dx_part = zeros<T>(n * D);
    const Fp8SiteScope shared_site(wt.follow.layer + c.dense_layers, "moe.shared");  // fp8-delayed
    ffn_backward(k.x_full.data(), n, D, wt.Fsl, wt.sw1, wt.sw3, wt.sw2, k.shared, dout.data(), dx_part.data(), g.sw1,
                 g.sw3, g.sw2);
    add_into(dx_res, tp_sum_to_res(tp, std::move(dx_part), b, S, D));
  }
  // routed part: this rank's dispatch rows only (each lane its own rows, once)
  Buffer<T> dout_d(dout_res.begin() + k.t0 * D, dout_res.begin() + k.t1 * D);
  auto dy = zeros<T>(n_d * K * D), dw = zeros<T>(n_d * K), dx_d = zeros<T>(n_d * D);
  combine_backward(k.dispatch.y.data(), k.w.data(), dout_d.data(), n_d, K, D, dy.data(), dw.data());
  rec(c, tp, wt, k, trace::Site::experts, trace::Dir::bwd, dy.data(), K * D);
  rec(c, tp, wt, k, trace::Site::route_w, trace::Dir::bwd, dw.data(), K);
  {
    const Fp8SiteScope site(wt.follow.layer + c.dense_layers, "moe.experts");  // fp8-delayed
    ep_dispatch_backward(c, ep, wt.experts, dy.data(), n_d, k.dispatch, dx_d.data(), g.w1, g.w3, g.w2);
  }
  auto ds = zeros<T>(n_d * E);
  route_weights_backward(k.s.data(), k.chosen.data(), n_d, E, K, c.route_norm, c.route_scale, dw.data(), ds.data());
  if (c.aux_alpha > 0 && aux_per_lane(tp)) {  // bug zoo: the statistics of this lane's chunks
    const int64_t Sl = S / tp.size;
    const T coef = static_cast<T>(c.aux_alpha / aux_batch(c) * current_loss_scale());
    for (int64_t q = 0; q < b; ++q)
      aux_loss_backward(k.s.data() + q * Sl * E, k.chosen.data() + q * Sl * K, Sl, E, K, coef, ds.data() + q * Sl * E);
  } else if (c.aux_alpha > 0) {
    Buffer<T> ds_full = aux_whole_sequences_backward(c, cp, k, b);  // (n, E): this rank's chunk
    add_into(ds, tp.size > 1 ? slice_dispatch(tp, ds_full, k.t0, k.t1, b, S, E) : ds_full);
  }
  rec(c, tp, wt, k, trace::Site::scores, trace::Dir::bwd, ds.data(), E);
  auto dlogits = zeros<T>(n_d * E);
  router_scores_backward(k.s.data(), ds.data(), n_d, E, c.score, dlogits.data());
  rec(c, tp, wt, k, trace::Site::router, trace::Dir::bwd, dlogits.data(), E);
  matmul_backward(k.x_d.data(), wt.gate, dlogits.data(), dx_d.data(), g.gate, n_d, D, E);
  if (split_copies(tp) && injected("gather_backward_drops_peers"))  // bug zoo: this lane's rows only
    add_into(dx_res.data() + k.t0 * D, dx_d.data(), n_d * D);
  else if (split_copies(tp))
    add_into(dx_res, gather_dispatch(tp, dx_d, n, b, S, D));
  else
    add_into(dx_res, dx_d);
}

template <class T> std::vector<int64_t> pmoe_token_ids(const ModelConfig& c, const TpContext& tp, const CpContext& cp,
                                                       const PMoeCache<T>& k, int64_t g0) {
  return routed_token_ids(c, tp, cp, k, g0);
}

#define PARITY_INSTANTIATE(T)                                                                                       \
  template std::vector<int64_t> pmoe_token_ids<T>(const ModelConfig&, const TpContext&, const CpContext&,           \
                                                  const PMoeCache<T>&, int64_t);                                    \
  template void pmoe_forward<T>(const ModelConfig&, const TpContext&, const CpContext&, const EpContext&,           \
                                const PMoeWeights<T>&, const Buffer<T>&, int64_t, Buffer<T>&, PMoeCache<T>&);       \
  template void pmoe_backward<T>(const ModelConfig&, const TpContext&, const CpContext&, const EpContext&,          \
                                 const PMoeWeights<T>&, int64_t, const PMoeCache<T>&, const Buffer<T>&, Buffer<T>&, \
                                 const PMoeGrads<T>&);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
