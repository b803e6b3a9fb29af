// The MoE block across TP lanes with routed experts sharded like the dense MLP (ep 1,
// etp = tp): every lane runs every expert on its chunk of the hidden dimension.
// Routing: without SP every lane routes every token (replicated: the router gradient is
// identical on every lane); with SP each lane routes its own tokens and the routing is
// all-gathered (the router gradient is partitioned: summed over TP at the step's end).
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "ops/permute.h"
#include "ops/swiglu.h"
#include "parallel/tp_ops.h"

namespace parity {

template <class T> struct PMoeWeights {
  const T *gate, *w1, *w3, *w2;       // gate (D, E) full; experts (E, D, Fl), (E, Fl, D)
  const T *sw1, *sw3, *sw2;           // shared (D, Fsl), (Fsl, D) or nullptr
  const T* bias;                      // (E)
  int64_t Fl = 0, Fsl = 0;            // this lane's hidden sizes
};
template <class T> struct PMoeGrads {
  T *gate, *w1, *w3, *w2, *sw1, *sw3, *sw2;
};

template <class T> struct PMoeCache {
  std::vector<T> logits, s;            // (n_res, E) this lane's tokens
  std::vector<int64_t> chosen;         // (n_res, K)
  std::vector<T> w;                    // (n_res, K)
  std::vector<T> s_full, w_full;       // (n, E), (n, K) every token of the micro-batch
  std::vector<int64_t> chosen_full;    // (n, K)
  std::vector<T> x_full;               // (n, D)
  Permutation perm;
  std::vector<T> xg, yg, y;            // (n*K, D)
  std::vector<FfnCache<T>> experts;
  FfnCache<T> shared;
  double aux = 0;                      // this micro-batch's aux part (identical on lanes)
};

// x_res (n_res, D) -> out_res (n_res, D); b sequences of S tokens.
template <class T>
void pmoe_forward(const ModelConfig& c, const TpContext& tp, const PMoeWeights<T>& wt, const std::vector<T>& x_res,
                  int64_t b, std::vector<T>& out_res, PMoeCache<T>& cache);
// dx_res (n_res, D) +=; TP-local parameter gradients +=.
template <class T>
void pmoe_backward(const ModelConfig& c, const TpContext& tp, const PMoeWeights<T>& wt, const std::vector<T>& x_res,
                   int64_t b, const PMoeCache<T>& cache, const std::vector<T>& dout_res, std::vector<T>& dx_res,
                   const PMoeGrads<T>& g);

}  // namespace parity
