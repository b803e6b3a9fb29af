// Context parallel (Megatron's cp, torchtitan's CP): every sequence of a micro-batch is split
// into cp contiguous chunks, rank cp_r holding positions [cp_r·S/cp, (cp_r+1)·S/cp) of each
// of its sequences; under layout.cp_order balanced (Megatron's load-balanced order) into 2·cp
// chunks of S/(2·cp), rank cp_r holding chunks cp_r and 2·cp-1-cp_r, in that order. A local
// buffer is (b, S/cp, W) row-major, the full one (b, S, W) in global position order.
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
#include "ops/attention.h"

namespace parity {

// A run of a rank's local rows that holds consecutive global positions: rows [row, row + rows)
// at positions [pos, pos + rows).
struct CpBlock {
  int64_t row, rows, pos;
};

struct CpContext {
  comm::Communicator* cp = nullptr;
  int64_t rank = 0, size = 1;
  bool balanced = false;                                // layout.cp_order balanced
  int64_t chunk(int64_t S) const { return S / size; }  // positions per rank
  // Rank r's blocks of a sequence of S positions (this rank's by default): one block of S/cp
  // contiguous, two of S/(2·cp) balanced.
  std::vector<CpBlock> blocks(int64_t S, int64_t r) const {
    if (!balanced) return {{0, S / size, r * (S / size)}};
    const int64_t half = S / (2 * size);
    return {{0, half, r * half}, {half, half, (2 * size - 1 - r) * half}};
  }
  std::vector<CpBlock> blocks(int64_t S) const { return blocks(S, rank); }
  // The global position of this rank's local row i (0 <= i < S/cp).
  int64_t position(int64_t S, int64_t i) const {
    for (const CpBlock& k : blocks(S))
      if (i >= k.row && i < k.row + k.rows) return k.pos + (i - k.row);
    return -1;
  }
  // The global positions of b sequences' local rows (b·S/cp), row q·S/cp + i at position(S, i).
  std::vector<int64_t> positions(int64_t b, int64_t S) const;
};

// (b, S/cp, W) local -> (b, S, W), every rank's chunk in place. Identity for cp 1.
template <class T> Buffer<T> cp_gather(const CpContext& c, const Buffer<T>& local, int64_t b, int64_t S, int64_t W);
// (b, S, W) partial on every rank -> (b, S/cp, W): this rank's chunk of the sum over ranks.
template <class T>
Buffer<T> cp_reduce_scatter(const CpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W);
// (b, S, W) -> (b, S/cp, W): this rank's chunk, no communication.
template <class T> Buffer<T> cp_slice(const CpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W);

// Attention of b sequences across the cp group, hd = this lane's heads (ops/attention.h). q
// (b, S/cp, Hl·Dh) this rank's queries; k, v (b, S/cp, Gl·Dh), all-gathered inside. out (b, S/cp, Hl·Dh).
template <class T> struct CpAttentionCache {
  Buffer<T> k_full, v_full;  // (b, S, Gl·Dh)
  Buffer<T> probs;           // (b, Hl, S/cp, S)
};
template <class T>
void cp_attention_forward(const CpContext& c, const Buffer<T>& q, const Buffer<T>& k, const Buffer<T>& v, int64_t b,
                          int64_t S, AttnHeads hd, Buffer<T>& out, CpAttentionCache<T>& cache);
// dq (b, S/cp, Hl·Dh), dk, dv (b, S/cp, Gl·Dh) +=; dk, dv summed over the cp group's queries (reduce-scatter).
template <class T>
void cp_attention_backward(const CpContext& c, const Buffer<T>& q, const CpAttentionCache<T>& cache,
                           const Buffer<T>& dout, int64_t b, int64_t S, AttnHeads hd, Buffer<T>& dq, Buffer<T>& dk,
                           Buffer<T>& dv);

// This rank's chunk (b, S/cp) of b token sequences (b, S).
std::vector<int64_t> cp_slice_tokens(const CpContext& c, const std::vector<int64_t>& tokens, int64_t b, int64_t S);

}  // namespace parity
