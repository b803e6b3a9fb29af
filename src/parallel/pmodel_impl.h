// ParallelModel<T>::Impl: one micro-batch's view of the parallel model (its sizes, the gathered
// weights, the trace records), shared by parallel/pmodel.cpp (the model's passes) and
// parallel/pmodel_blocks.cpp (a layer's attention and FFN blocks). Private to those two files.
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"
#include "core/fp8_delayed.h"
#include "core/inject.h"
#include "core/precision.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "model/trace.h"
#include "parallel/pmodel.h"
#include "parallel/pmoe.h"

namespace parity {

namespace pmodel_detail {

// Columns [c0, c0 + cols) of a (rows, W) matrix, and their gradient added back.
template <class T> Buffer<T> take_cols(const T* w, int64_t rows, int64_t W, int64_t c0, int64_t cols) {
  Buffer<T> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(w + r * W + c0, cols, out.data() + r * cols);
  return out;
}
template <class T> void add_cols(T* g, const Buffer<T>& part, int64_t rows, int64_t W, int64_t c0, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) g[r * W + c0 + j] += part[static_cast<size_t>(r * cols + j)];
}

}  // namespace pmodel_detail

// The key / value columns a lane reads of wk and wv (model.kv_heads): its TP shard whole where
// they are split over tp, or, where the plan replicates them over tp (fewer KV heads than
// lanes, mesh/param_layout.cpp), the one head its query heads share: tp_rank / (tp / kv_heads).
struct KvCols {
  int64_t c0 = 0, cols = 0;
  bool shared = false;  // a replicated head: the lane's dk, dv are its query heads' part only
};

template <class T> struct ParallelModel<T>::Impl {
  ParallelModel<T>& m;
  const ModelConfig& c;
  int64_t b, n, n_res;  // sequences, their tokens, this lane's residual tokens
  ModelConfig chunk;    // c with seq = this rank's context-parallel chunk (S / cp)

  // One allgather per FSDP group for the parameters `qs` (plan indices) not gathered yet in
  // this step (a flat FSDP unit: its dense parameters, and its routed experts), held in
  // m.gathered_ until the next zero_grads().
  void gather(const std::vector<size_t>& qs) const {
    std::vector<const ShardedParam<T>*> dense, experts;
    std::vector<size_t> dense_q, experts_q;
    for (size_t q : qs) {
      if (m.is_gathered_[q]) continue;
      const bool routed = m.params[q].spec().family == Family::routed_experts;
      (routed ? experts : dense).push_back(&m.params[q]), (routed ? experts_q : dense_q).push_back(q);
    }
    for (const auto& [unit, which] : {std::pair{&dense, &dense_q}, std::pair{&experts, &experts_q}}) {
      std::vector<Tensor<T>> got = gather_all(*unit);
      for (size_t i = 0; i < got.size(); ++i) {
        // the compute copy, rounded to its plan entry's format (parallel/param_plan.h); shards stay master
        storage_point(got[i].ptr(), got[i].numel(), m.compute_copy_[(*which)[i]]);
        fp8_weight((*which)[i], got[i]);
        m.gathered_[(*which)[i]] = std::move(got[i]), m.is_gathered_[(*which)[i]] = 1;
      }
    }
  }
  // fp8 (core/fp8.h): a linear's gathered weight quantized to E4M3 as its plan entry says, one scale per
  // tensor (per routed expert) from its amax over every piece: a weight split over TP (ETP for the routed
  // experts) takes the max over those lanes. FSDP gathered it whole already. The same order on every lane,
  // a lane whose piece is empty (an uneven split) included: it joins the reduction with an amax of 0.
  void fp8_weight(size_t q, Tensor<T>& t) const {
    const auto& [on, amax] = m.fp8_weight_[q];
    if (!on) return;
    const ParamSpec& spec = m.params[q].spec();
    const bool routed = spec.family == Family::routed_experts;
    const int64_t blocks = routed ? t.shape[0] : 1;  // this rank's experts
    fp8_tensors(t.ptr(), blocks, blocks == 0 ? 0 : t.numel() / blocks, amax, spec.name,
                routed ? m.ep_.e0 : 0);  // fp8-delayed: its slots (a routed expert's by its global index)
  }
  const Tensor<T>& w(size_t q) const {
    if (!m.is_gathered_[q]) throw Error("ParallelModel: " + m.params[q].spec().name + " read before its gather");
    return m.gathered_[q];
  }
  // The zoo's fp8_partial_sum_quantized: under fp8 with tp > 1, a row-parallel linear's output (wo's, the
  // dense MLP's w2's), this lane's partial sum, quantized to E4M3 before the TP reduction (the reduce-scatter
  // compressed to fp8), each row with the lane's own current scale from its partial's amax. One device
  // never quantizes a linear's output; a no-op without the bug.
  void partial_sum_quantized(T* x, int64_t rows, int64_t k) const {
    static const bool on = injected("fp8_partial_sum_quantized");
    if (!on || !fp8_on() || m.tp_.size < 2) return;
    for (int64_t r = 0; r < rows; ++r) {
      T* row = x + r * k;
      float amax = 0;
      for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(static_cast<float>(row[j])));
      const float s = fp8_scale(Fp8::e4m3, amax), inv = 1.0f / s;
      for (int64_t j = 0; j < k; ++j)
        row[j] = static_cast<T>(round_fp8(Fp8::e4m3, static_cast<float>(row[j]) * s) * inv);
    }
  }
  T* g(size_t q) const { return m.mp_grads[q].ptr(); }
  // A parameter the model may not have (kNoParam: a norm's bias under RMSNorm): null then.
  const T* w_or_null(size_t q) const { return q == kNoParam ? nullptr : w(q).ptr(); }
  T* g_or_null(size_t q) const { return q == kNoParam ? nullptr : g(q); }
  int64_t local_dim(size_t q, size_t d) const { return m.params[q].mp_shape()[d]; }
  // model.position rope: the rotation of this rank's q and k rows (b sequences of chunk.seq rows,
  // Hl heads) by their GLOBAL positions (the context-parallel chunk's, in its order). The bug zoo
  // (core/inject.h): rope_local_positions_cp, every chunk rotated as if it began the sequence;
  // rope_contiguous_positions_balanced_cp, the contiguous order's positions under the balanced one.
  Rope<T> rope(int64_t Hl) const {
    static const bool local_bug = injected("rope_local_positions_cp"),
                      chunk_bug = injected("rope_contiguous_positions_balanced_cp");
    const int64_t Sc = chunk.seq;
    std::vector<int64_t> pos = local_bug ? rope_positions(b, Sc, 0)
                               : chunk_bug ? rope_positions(b, Sc, m.cp_.rank * Sc)
                                           : m.cp_.positions(b, c.seq);
    return Rope<T>(pos, Hl, c.head_dim(), c.rope_theta);
  }
  // The bug zoo's qk_norm_after_rope: the rotation before the QK-norm instead of after it.
  bool rope_first() const {
    static const bool bug = injected("qk_norm_after_rope");
    return bug && c.qk_norm && c.position == Position::rope;
  }
  Buffer<T> full(const Buffer<T>& res, int64_t W) const { return tp_to_full(m.tp_, res, b, chunk.seq, W); }
  Buffer<T> to_res(Buffer<T> part, int64_t W) const { return tp_sum_to_res(m.tp_, std::move(part), b, chunk.seq, W); }
  // A traced tensor (model/trace.h) of `cols` columns, [col0, col0 + cols) of full (-1: all).
  void rec(trace::Site s, int64_t l, trace::Dir d, const Buffer<T>& x, int64_t cols,
           trace::Rows rows = trace::Rows::stream, int64_t col0 = 0, int64_t full = -1) const {
    // a lane without columns of it (a vocab of 24 over tp 7 leaves the last lane none) holds nothing
    // to trace; its division by zero crashed a build whose compiler hoisted it above record's check
    if (cols <= 0) return;
    trace::record(s, l, d, x.data(), static_cast<int64_t>(x.size()) / cols, cols, rows, col0, full);
  }
  // This lane's heads of a projection's output: columns from wq's own offset (a column split over tp).
  void rec_heads(trace::Site s, int64_t l, trace::Dir d, const Buffer<T>& x, size_t q) const {
    rec(s, l, d, x, local_dim(q, 1), trace::Rows::chunk, m.params[q].mp_offset(1), c.dim);
  }
  int64_t layer_of(const LayerParams& P) const { return &P - m.layer_.data(); }
  KvCols kv_cols(const LayerParams& P) const {
    const int64_t local = local_dim(P.wk, 1), Dh = c.head_dim();
    if (m.tp_.size == 1 || local != c.kv_dim()) return {0, local, false};  // split over tp (or no tp)
    return {(m.tp_.rank / (m.tp_.size / c.kv())) * Dh, Dh, true};
  }
  // k or v = a · W[:, kc] (n, kc.cols), and its backward (W's gradient into kc's columns).
  void kv_project(const Buffer<T>& a, size_t q, const KvCols& kc, Buffer<T>& out) const {
    const int64_t D = c.dim, Wd = local_dim(q, 1);
    if (!kc.shared) return matmul_forward(a.data(), w(q).ptr(), out.data(), n, D, Wd);
    const Buffer<T> cols = pmodel_detail::take_cols(w(q).ptr(), D, Wd, kc.c0, kc.cols);
    matmul_forward(a.data(), cols.data(), out.data(), n, D, kc.cols);
  }
  void kv_project_backward(const Buffer<T>& a, size_t q, const KvCols& kc, const Buffer<T>& dy, Buffer<T>& da) const {
    const int64_t D = c.dim, Wd = local_dim(q, 1);
    if (!kc.shared) return matmul_backward(a.data(), w(q).ptr(), dy.data(), da.data(), g(q), n, D, Wd);
    auto gw = zeros<T>(D * kc.cols);
    const Buffer<T> cols = pmodel_detail::take_cols(w(q).ptr(), D, Wd, kc.c0, kc.cols);
    matmul_backward(a.data(), cols.data(), dy.data(), da.data(), gw.data(), n, D, kc.cols);
    pmodel_detail::add_cols(g(q), gw, D, Wd, kc.c0, kc.cols);
  }
  // fp8 (core/fp8.h): a replicated head's dk or dv summed over the lanes sharing it, so that the policy
  // quantizes the whole rows one device quantizes, not this lane's query heads' part: placed at its head's
  // columns of a zero (n, kv_heads·Dh) tensor and summed over the tp group (the other lanes add exact 0s).
  // Every sharing lane then holds the same gradient; the first of them alone takes the projections'
  // backward (kv_backward_here), so the sums over tp of da and of wk's and wv's gradients
  // (param_plan.cpp) count it once.
  Buffer<T> kv_summed(const Buffer<T>& x, const KvCols& kc) const {
    const int64_t K = c.kv_dim();
    auto whole = zeros<T>(n * K);
    for (int64_t row = 0; row < n; ++row)
      copy_values(whole.data() + row * K + kc.c0, x.data() + row * kc.cols, kc.cols);
    tp_allreduce(m.tp_, whole);
    auto out = zeros<T>(n * kc.cols);
    for (int64_t row = 0; row < n; ++row)
      copy_values(out.data() + row * kc.cols, whole.data() + row * K + kc.c0, kc.cols);
    return out;
  }
  bool kv_backward_here(const KvCols& kc) const {
    return !kc.shared || !fp8_on() || m.tp_.rank % (m.tp_.size / c.kv()) == 0;
  }
  // A key / value record: this lane's columns of the (., kv_heads·Dh) tensor.
  void rec_kv(trace::Site s, int64_t l, trace::Dir d, const Buffer<T>& x, const LayerParams& P,
              const KvCols& kc) const {
    const int64_t c0 = kc.shared ? kc.c0 : m.params[P.wk].mp_offset(1);
    rec(s, l, d, x, kc.cols, trace::Rows::chunk, c0, c.kv_dim());
  }
  // A replicated head's dk or dv on this lane is its query heads' part only: for the trace, each
  // lane's part placed at its head's columns and summed over the tp group (the lanes sharing a head
  // add their parts, the others exact 0s), so every lane records the whole gradient. Traced only:
  // the step sums the weights' gradients itself (param_plan.cpp).
  void rec_kv_summed(trace::Site s, int64_t l, const Buffer<T>& x, const KvCols& kc) const {
    const trace::Recorder* r = trace::active();
    if (r == nullptr || r->paused > 0) return;
    const int64_t K = c.kv_dim();
    auto whole = zeros<T>(n * K);
    for (int64_t row = 0; row < n; ++row)
      copy_values(whole.data() + row * K + kc.c0, x.data() + row * kc.cols, kc.cols);
    tp_allreduce(m.tp_, whole);
    rec(s, l, trace::Dir::bwd, whole, K, trace::Rows::chunk, 0, K);
  }

  void attention_forward_block(const LayerParams& P, Buffer<T>& h, LayerCache<T>& L) const;
  void attention_backward_block(const LayerParams& P, Buffer<T>& dh, const LayerCache<T>& L) const;
  void ffn_forward_block(int64_t l, const LayerParams& P, Buffer<T>& h, LayerCache<T>& L) const;
  void ffn_backward_block(int64_t l, const LayerParams& P, Buffer<T>& dh, const LayerCache<T>& L) const;
  PMoeWeights<T> moe_weights(const LayerParams& P, int64_t l) const;
  // The first forward's routing of an MoE layer, into the micro-batch's result.
  void record_routing(PMicroResult& res, int64_t l, const LayerCache<T>& L) const {
    const auto i = static_cast<size_t>(l - c.dense_layers);  // the MoE layer
    res.aux += L.moe.aux;
    res.chosen[i] = to_vector(L.moe.chosen);
    res.first_row[i] = L.moe.t0;
    res.followed[i] = L.moe.followed;
    std::vector<int64_t> counts(static_cast<size_t>(c.experts), 0);
    for (int64_t e : L.moe.chosen) ++counts[static_cast<size_t>(e)];  // every token is routed by one rank
    res.counts[i] = counts;
  }
  // The backward's recompute of layer l's attention block (FFN block) from its saved input
  // (parallel/recompute.h); the FFN's checks that an MoE layer routed as in the first forward.
  void recompute_attention(int64_t l, const LayerParams& P, LayerCache<T>& L) const;
  void recompute_ffn(int64_t l, const LayerParams& P, LayerCache<T>& L) const;
};

}  // namespace parity
