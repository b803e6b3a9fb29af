#include "parallel/cp_ops.h"

#include <algorithm>

#include "core/inject.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "parallel/tp_ops.h"

namespace parity {

namespace {
// The sequence split of tp_ops (sp_gather and friends) is the same chunking over another
// group: reuse it with the cp communicator.
TpContext as_split(const CpContext& c) { return {c.cp, c.rank, c.size, true}; }

// Under the balanced order the sequence split's rank order (rank r's S/cp rows at r·S/cp, as
// sp_gather lays them) is not the global order: move every rank's blocks between the two,
// (b, S, W) -> (b, S, W). An exact copy; the contiguous order is the identity.
template <class T, class Buf>
Buf reorder(const CpContext& c, const Buf& in, int64_t b, int64_t S, int64_t W, bool to_global) {
  if (!c.balanced) return in;
  Buf out(in.size());
  const int64_t Sc = c.chunk(S);
  for (int64_t r = 0; r < c.size; ++r)
    for (const CpBlock& k : c.blocks(S, r))
      for (int64_t q = 0; q < b; ++q) {
        const int64_t ranked = (q * S + r * Sc + k.row) * W, global = (q * S + k.pos) * W;
        std::copy_n(in.begin() + (to_global ? ranked : global), k.rows * W,
                    out.begin() + (to_global ? global : ranked));
      }
  return out;
}

// This rank's rows (b, S/cp, W) of a (b, S, W) buffer in global order.
template <class T, class Buf> Buf slice_rows(const CpContext& c, const Buf& full, int64_t b, int64_t S, int64_t W) {
  const int64_t Sc = c.chunk(S);
  Buf out(static_cast<size_t>(b * Sc * W));
  for (const CpBlock& k : c.blocks(S))
    for (int64_t q = 0; q < b; ++q)
      std::copy_n(full.begin() + (q * S + k.pos) * W, k.rows * W, out.begin() + (q * Sc + k.row) * W);
  return out;
}
}  // namespace

std::vector<int64_t> CpContext::positions(int64_t b, int64_t S) const {
  const int64_t Sc = chunk(S);
  std::vector<int64_t> pos(static_cast<size_t>(b * Sc));
  for (int64_t r = 0; r < b * Sc; ++r) pos[static_cast<size_t>(r)] = position(S, r % Sc);
  return pos;
}

template <class T> Buffer<T> cp_gather(const CpContext& c, const Buffer<T>& local, int64_t b, int64_t S, int64_t W) {
  return c.size > 1 ? reorder<T>(c, sp_gather(as_split(c), local, b, S, W), b, S, W, true) : local;
}

template <class T>
Buffer<T> cp_reduce_scatter(const CpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W) {
  return c.size > 1 ? sp_reduce_scatter(as_split(c), reorder<T>(c, full, b, S, W, false), b, S, W) : full;
}

template <class T> Buffer<T> cp_slice(const CpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W) {
  if (c.size == 1) return full;
  return c.balanced ? slice_rows<T>(c, full, b, S, W) : sp_slice(as_split(c), full, b, S, W);
}

std::vector<int64_t> cp_slice_tokens(const CpContext& c, const std::vector<int64_t>& tokens, int64_t b, int64_t S) {
  return slice_rows<int64_t>(c, tokens, b, S, 1);
}

template <class T>
void cp_attention_forward(const CpContext& c, const Buffer<T>& q, const Buffer<T>& k, const Buffer<T>& v, int64_t b,
                          int64_t S, AttnHeads hd, Buffer<T>& out, CpAttentionCache<T>& cache) {
  const int64_t H = hd.H, W = H * hd.Dh, Wk = hd.G * hd.Dh, Sc = c.chunk(S);
  cache.k_full = cp_gather(c, k, b, S, Wk);
  cache.v_full = cp_gather(c, v, b, S, Wk);
  out = zeros<T>(b * Sc * W);
  cache.probs = zeros<T>(b * H * Sc * S);  // per sequence and block: (H, block rows, S)
  for (int64_t s = 0; s < b; ++s)
    for (const CpBlock& blk : c.blocks(S))  // each block of consecutive positions: the causal mask at its offset
      attention_forward_rows(q.data() + (s * Sc + blk.row) * W, cache.k_full.data() + s * S * Wk,
                             cache.v_full.data() + s * S * Wk, blk.rows, blk.pos, S, hd,
                             out.data() + (s * Sc + blk.row) * W, cache.probs.data() + (s * Sc + blk.row) * H * S);
}

template <class T>
void cp_attention_backward(const CpContext& c, const Buffer<T>& q, const CpAttentionCache<T>& cache,
                           const Buffer<T>& dout, int64_t b, int64_t S, AttnHeads hd, Buffer<T>& dq, Buffer<T>& dk,
                           Buffer<T>& dv) {
  const int64_t H = hd.H, W = H * hd.Dh, Wk = hd.G * hd.Dh, Sc = c.chunk(S);
  auto dk_full = zeros<T>(b * S * Wk), dv_full = zeros<T>(b * S * Wk);  // this chunk's queries' part
  for (int64_t s = 0; s < b; ++s)
    for (const CpBlock& blk : c.blocks(S))  // the blocks' parts of dK, dV added in block order
      attention_backward_rows(q.data() + (s * Sc + blk.row) * W, cache.k_full.data() + s * S * Wk,
                              cache.v_full.data() + s * S * Wk, cache.probs.data() + (s * Sc + blk.row) * H * S,
                              dout.data() + (s * Sc + blk.row) * W, blk.rows, blk.pos, S, hd,
                              dq.data() + (s * Sc + blk.row) * W, dk_full.data() + s * S * Wk,
                              dv_full.data() + s * S * Wk);
  // bug zoo (core/inject.h) cp_kv_grad_local: each rank keeps its own queries' part of its
  // keys' gradient and drops what the later chunks' queries sent back
  static const bool local_bug = injected("cp_kv_grad_local");
  if (local_bug && c.size > 1) {
    add_into(dk, cp_slice(c, dk_full, b, S, Wk));
    add_into(dv, cp_slice(c, dv_full, b, S, Wk));
    return;
  }
  add_into(dk, cp_reduce_scatter(c, dk_full, b, S, Wk));
  add_into(dv, cp_reduce_scatter(c, dv_full, b, S, Wk));
}

template Buffer<int64_t> cp_gather<int64_t>(const CpContext&, const Buffer<int64_t>&, int64_t, int64_t, int64_t);
template Buffer<int64_t> cp_slice<int64_t>(const CpContext&, const Buffer<int64_t>&, int64_t, int64_t, int64_t);

#define PARITY_INSTANTIATE(T)                                                                                       \
  template Buffer<T> cp_gather<T>(const CpContext&, const Buffer<T>&, int64_t, int64_t, int64_t);                  \
  template Buffer<T> cp_reduce_scatter<T>(const CpContext&, const Buffer<T>&, int64_t, int64_t, int64_t);          \
  template Buffer<T> cp_slice<T>(const CpContext&, const Buffer<T>&, int64_t, int64_t, int64_t);                   \
  template void cp_attention_forward<T>(const CpContext&, const Buffer<T>&, const Buffer<T>&, const Buffer<T>&,    \
                                        int64_t, int64_t, AttnHeads, Buffer<T>&, CpAttentionCache<T>&);            \
  template void cp_attention_backward<T>(const CpContext&, const Buffer<T>&, const CpAttentionCache<T>&,          \
                                         const Buffer<T>&, int64_t, int64_t, AttnHeads, Buffer<T>&,                 \
                                         Buffer<T>&, Buffer<T>&);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
