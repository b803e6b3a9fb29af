// Tensor- and sequence-parallel building blocks over the TP group.
//
// Sequence parallel shards each sequence's S positions into tp equal chunks; lane r holds
// positions [r·S/tp, (r+1)·S/tp) of every sequence of its micro-batch: a local buffer is
// (b, S/tp, W) row-major, the full one (b, S, W).
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/fp8.h"

namespace parity {

struct TpContext {
  comm::Communicator* tp = nullptr;
  int64_t rank = 0, size = 1;
  bool sp = false;
};

// The fp8 policy's amax completed over a group that splits a row or a weight (core/fp8.h): the max over
// its members, in place; an empty function for a group of one (null). The bug zoo's fp8_amax_per_lane
// (core/inject.h): never reduced, each lane quantizes its part with its own amax.
AmaxReduce fp8_amax_over(comm::Communicator* group);

// In-place sum over the TP group (the forward of a row-parallel linear, the backward of a
// column-parallel one). No-op for tp 1.
template <class T> void tp_allreduce(const TpContext& c, Buffer<T>& buf);

// (b, S/tp, W) local -> (b, S, W) full, every lane's chunk in place.
template <class T> Buffer<T> sp_gather(const TpContext& c, const Buffer<T>& local, int64_t b, int64_t S, int64_t W);
// (b, S, W) partial on every lane -> (b, S/tp, W): this lane's chunk of the sum over lanes.
template <class T>
Buffer<T> sp_reduce_scatter(const TpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W);
// (b, S, W) -> (b, S/tp, W): this lane's chunk, no communication.
template <class T> Buffer<T> sp_slice(const TpContext& c, const Buffer<T>& full, int64_t b, int64_t S, int64_t W);

// Entering a TP region (before a column-parallel matmul): sp ? sp_gather : the same
// tokens. Its backward is tp_sum_to_res.
template <class T> Buffer<T> tp_to_full(const TpContext& c, const Buffer<T>& res, int64_t b, int64_t S, int64_t W);
// Leaving a TP region (after a row-parallel matmul): sp ? sp_reduce_scatter : allreduce.
// Its backward is tp_to_full.
template <class T> Buffer<T> tp_sum_to_res(const TpContext& c, Buffer<T> full, int64_t b, int64_t S, int64_t W);

// Vocab-parallel embedding: this lane holds rows [v0, v0 + Vl) of the table (Vl, D).
// out (n, D) = partial lookup (rows of other lanes are 0); the caller sums over TP.
template <class T>
void vp_embedding_forward(const int64_t* ids, int64_t n, const T* table, int64_t v0, int64_t Vl, int64_t D, T* out);
template <class T>
void vp_embedding_backward(const int64_t* ids, int64_t n, const T* dout, int64_t v0, int64_t Vl, int64_t D, T* dtable);

// Vocab-parallel cross-entropy over logits (n, Vl) of vocabulary rows [v0, v0 + Vl): each
// lane's row max, sum of exp(x - its max) and target logit are all-gathered over TP in one
// collective and combined (global max M, sum_exp = sum of s_l * exp(m_l - M)). Returns the sum
// of the n token losses (identical on every lane); saves what the backward needs.
template <class T> struct VpCeCache {
  Buffer<T> row_max, sum_exp;  // (n)
};
template <class T>
double vp_cross_entropy_forward(const TpContext& c, const T* logits, const int64_t* targets, int64_t n, int64_t v0,
                                int64_t Vl, VpCeCache<T>& cache);
// dlogits (n, Vl) += scale * (softmax - onehot), this lane's columns.
template <class T>
void vp_cross_entropy_backward(const T* logits, const int64_t* targets, int64_t n, int64_t v0, int64_t Vl, T scale,
                               const VpCeCache<T>& cache, T* dlogits);

}  // namespace parity
