// The MoE block across ranks, for every folding: tp with or without SP, ep (experts split
// over the EP group, tokens dispatched with alltoallv) and etp (each expert's hidden
// dimension split over the ETP group, for any etp: the ETP group need not be the TP group).
//
// Every token is routed and dispatched by exactly one rank: with SP, the lane that holds
// it; without SP (TP lanes hold copies), lane r takes rows chunk(n, tp, r) of the copies.
// So the router gradient is partitioned over TP (summed over TP at the step's end), and
// the routed output of each lane's rows is all-gathered back into the replicated view
// (whose backward takes each lane's own rows, once). The shared expert is TP-sharded
// like the dense MLP.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/route_oracle.h"
#include "ops/swiglu.h"
#include "parallel/cp_ops.h"
#include "parallel/ep_dispatch.h"
#include "parallel/tp_ops.h"

namespace parity {

template <class T> struct PMoeWeights {
  const T* gate;                // (D, E)
  ExpertShard<T> experts;       // (El, D, Fl) / (El, Fl, D)
  const T *sw1, *sw3, *sw2;     // shared (D, Fsl), (Fsl, D) or nullptr
  int64_t Fsl = 0;
  const T* bias;                // (E)
  RouteFollow follow;           // near-tie arbitration (model/route_oracle.h); follow.first = g0, the
                                // micro-batch's first global sequence of this rank
};
template <class T> struct PMoeGrads {
  T *gate, *w1, *w3, *w2, *sw1, *sw3, *sw2;
};

template <class T> struct PMoeCache {
  int64_t t0 = 0, t1 = 0;              // this rank's dispatch rows of the residual buffer
  Buffer<T> x_d;                  // (n_d, D)
  Buffer<T> logits, s, w;         // (n_d, E), (n_d, E), (n_d, K)
  Buffer<int64_t> chosen;              // (n_d, K)
  Buffer<T> s_full;               // (b, S·cp, E) every token of the whole sequences (aux loss)
  Buffer<int64_t> chosen_full;         // (b, S·cp, K)
  DispatchCache<T> dispatch;
  Buffer<T> x_full;               // (n, D) for the shared expert
  FfnCache<T> shared;
  double aux = 0;                      // this micro-batch's aux part (identical on lanes)
  int64_t followed = 0;                // routed rows whose near-tie choice followed the baseline's
};

// x_res (n_res, D) -> out_res (n_res, D); b sequences of c.seq tokens. Under context
// parallel c.seq is this rank's chunk of each sequence (S / cp) and the aux loss gathers
// the chunks' statistics over cp (cp_ops.h).
template <class T>
void pmoe_forward(const ModelConfig& c, const TpContext& tp, const CpContext& cp, const EpContext& ep,
                  const PMoeWeights<T>& wt, const Buffer<T>& x_res, int64_t b, Buffer<T>& out_res,
                  PMoeCache<T>& cache);
// dx_res (n_res, D) +=; this rank's parameter gradients +=.
template <class T> void pmoe_backward(const ModelConfig& c, const TpContext& tp, const CpContext& cp,
                                      const EpContext& ep, const PMoeWeights<T>& wt, int64_t b,
                                      const PMoeCache<T>& cache, const Buffer<T>& dout_res, Buffer<T>& dx_res,
                                      const PMoeGrads<T>& g);

// The global token id (sequence * S + position, S the whole sequence) of each row this rank
// routed in `cache` (rows t0..t1 of its residual view; c.seq is its context-parallel chunk);
// g0: the micro-batch's first global sequence of this rank.
template <class T> std::vector<int64_t> pmoe_token_ids(const ModelConfig& c, const TpContext& tp, const CpContext& cp,
                                                       const PMoeCache<T>& cache, int64_t g0);

}  // namespace parity
