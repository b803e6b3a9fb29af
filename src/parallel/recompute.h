// Activation recompute (layout.recompute, docs/parallel.md "Activation recompute"): what a
// layer keeps between its forward and its backward, what recompute drops, how many bytes it
// holds, and the check that a recomputed MoE layer routed every token as its first forward did.
//
// With recompute a part of the layer (the attention block, the FFN block, or both: full)
// keeps only its input; the backward re-runs the part's forward from that input, collectives
// included, right before the part's backward. The forward is deterministic (the same ops in
// the same order on the same values, and every collective sums in the backend's fixed rank
// order), so the recomputed activations are bitwise the first forward's and so is every
// gradient.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "mesh/layout_config.h"
#include "ops/swiglu.h"
#include "parallel/cp_ops.h"
#include "parallel/pmoe.h"

namespace parity {

// One layer's activations kept for its backward (pmodel.cpp).
template <class T> struct LayerCache {
  // attention block: h_in (its input) ... h_mid (its output, the FFN block's input)
  Buffer<T> h_in, a_res, m1, r1, a_full, q, k, v, att, probs, h_mid;
  Buffer<T> q_raw, k_raw, rq, rk;  // QK-norm (model.qk_norm): q, k before it and its rstd per (token, head)
  CpAttentionCache<T> cp_attn;  // context parallel only
  // FFN block
  Buffer<T> bn_res, m2, r2, bn_full;
  FfnCache<T> mlp;
  PMoeCache<T> moe;
  Buffer<int64_t> routed;  // recompute of an MoE FFN: the first forward's choices (n_d, K), for the check
};

inline bool recomputes_attention(Recompute r) { return r == Recompute::full || r == Recompute::attention; }
inline bool recomputes_ffn(Recompute r) { return r == Recompute::full || r == Recompute::mlp; }

// After the layer's forward: drops what recompute `r` rebuilds in the backward. attention:
// everything of the attention block but h_in and h_mid (the FFN block's input); mlp:
// everything of the FFN block but its input h_mid, keeping the MoE routing (n_d x K
// integers) in `routed`; full: both, and h_mid too (only h_in, the layer's input, is left).
template <class T> void drop_for_recompute(LayerCache<T>& L, Recompute r);

// The bytes a layer's cache holds (every buffer, the MoE's dispatch bookkeeping included).
template <class T> int64_t held_bytes(const LayerCache<T>& L);

// Collective over `world` (every rank calls it for the same MoE layer, in the same order): the
// recomputed choices `again` must equal the first forward's `first` (n_d x K each; token_ids
// the global id of each row, sequence * seq + position). Throws parity::Error on every rank
// when any rank's differ, naming the layer and a token (its sequence, position, slot and both
// experts where this rank saw it), so that no rank goes on into a backward its peers left.
void check_recomputed_routing(comm::Communicator& world, int64_t layer, int64_t seq, const Buffer<int64_t>& first,
                              const Buffer<int64_t>& again, const std::vector<int64_t>& token_ids, int64_t K);

// Tests only (tests/parallel/recompute_worker.cpp); empty in every run of parity. Called, in
// fp64 runs, with the layer and the copy of the saved input its recompute is about to run
// from, so that a test can change it and see the routing check fire.
std::function<void(int64_t layer, std::span<double> saved)>& recompute_test_hook();

}  // namespace parity
