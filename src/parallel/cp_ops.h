// Context parallel (Megatron's cp, torchtitan's CP): every sequence of a micro-batch is split
// into cp contiguous chunks, rank cp_r holding positions [cp_r·S/cp, (cp_r+1)·S/cp) of each
// of its sequences. A local buffer is (b, S/cp, W) row-major, the full one (b, S, W).
//
// Everything per token (embedding, LayerNorm, projections, MLPs, routing, experts, the head
// and cross-entropy) runs on the chunk unchanged. Two things need the whole sequence:
//   attention   each chunk's queries see the keys and values of every earlier position: K and V
//               are all-gathered over cp (exact: a copy), the causal mask is applied in global
//               positions, and the backward's dK, dV (partial sums over this chunk's queries) are
//               reduce-scattered back to their owners (docs/parallel.md says why not a ring);
//   aux loss    the per-sequence balance statistics: scores and choices are all-gathered over cp
//               and the loss is computed on whole sequences (pmoe.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"

namespace parity {

struct CpContext {
  comm::Communicator* cp = nullptr;
  int64_t rank = 0, size = 1;
  int64_t chunk(int64_t S) const { return S / size; }          // positions per rank
  int64_t offset(int64_t S) const { return rank * (S / size); }  // this rank's first global position
};

// (b, S/cp, W) local -> (b, S, W), every rank's chunk in place. Identity for cp 1.
template <class T> Buffer<T> cp_gather(const CpContext& c, const Buffer<T>& local, int64_t b, int64_t S, int64_t W);
// (b, S, W) partial on every rank -> (b, S/cp, W): this rank's chunk of the sum over ranks.
template <class T>
Buffer<T> cp_reduce_scatter(const CpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W);
// (b, S, W) -> (b, S/cp, W): this rank's chunk, no communication.
template <class T> Buffer<T> cp_slice(const CpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W);

// Attention of b sequences across the cp group. q (b, S/cp, Hl·Dh) this rank's queries;
// k, v the same shape, all-gathered inside. out (b, S/cp, Hl·Dh).
template <class T> struct CpAttentionCache {
  Buffer<T> k_full, v_full;  // (b, S, Hl·Dh)
  Buffer<T> probs;           // (b, Hl, S/cp, S)
};
template <class T>
void cp_attention_forward(const CpContext& c, const Buffer<T>& q, const Buffer<T>& k, const Buffer<T>& v, int64_t b,
                          int64_t S, int64_t H, int64_t Dh, Buffer<T>& out, CpAttentionCache<T>& cache);
// dq, dk, dv (b, S/cp, Hl·Dh) +=; dk, dv summed over the cp group's queries (reduce-scatter).
template <class T>
void cp_attention_backward(const CpContext& c, const Buffer<T>& q, const CpAttentionCache<T>& cache,
                           const Buffer<T>& dout, int64_t b, int64_t S, int64_t H, int64_t Dh, Buffer<T>& dq,
                           Buffer<T>& dk, Buffer<T>& dv);

// This rank's chunk (b, S/cp) of b token sequences (b, S).
std::vector<int64_t> cp_slice_tokens(const CpContext& c, const std::vector<int64_t>& tokens, int64_t b, int64_t S);

}  // namespace parity
