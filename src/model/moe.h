// The MoE block of MODEL.md on one device: router, top-k, routed experts, shared expert,
// sequence-wise aux loss. Its forward saves what its backward needs in MoeCache.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/route_oracle.h"
#include "ops/permute.h"
#include "ops/swiglu.h"

namespace parity {

template <class T> struct MoeWeights {
  const T* gate;           // (D, E)
  const T* w1;             // (E, D, F)
  const T* w3;             // (E, D, F)
  const T* w2;             // (E, F, D)
  const T* shared_w1;      // (D, Fs) or nullptr
  const T* shared_w3;      // (D, Fs)
  const T* shared_w2;      // (Fs, D)
  const T* expert_bias;    // (E)
  RouteFollow follow;      // near-tie arbitration (model/route_oracle.h); no oracle: route freely
};

template <class T> struct MoeGrads {
  T *gate, *w1, *w3, *w2, *shared_w1, *shared_w3, *shared_w2;
};

template <class T> struct MoeCache {
  Buffer<T> logits, s;          // (n, E)
  std::vector<int64_t> chosen;       // (n, K)
  Buffer<T> w;                  // (n, K)
  Permutation perm;
  Buffer<T> xg, yg;             // (n*K, D) grouped by expert
  std::vector<FfnCache<T>> experts;  // (E)
  Buffer<T> y;                  // (n*K, D) back in (token, slot) order
  FfnCache<T> shared;
  Buffer<T> shared_out;         // (n, D)
  double aux = 0;                    // this block's aux-loss contribution (already * alpha / B)
  int64_t followed = 0;              // tokens whose near-tie choice followed the baseline's
};

// out (n, D) = MoE(x); x (n, D) holds n = seqs * S tokens, whole sequences.
template <class T>
void moe_forward(const ModelConfig& c, const MoeWeights<T>& wt, const T* x, int64_t n, T* out, MoeCache<T>& cache);
// dx (n, D) +=, parameter gradients +=.
template <class T>
void moe_backward(const ModelConfig& c, const MoeWeights<T>& wt, const T* x, int64_t n, const MoeCache<T>& cache,
                  const T* dout, T* dx, const MoeGrads<T>& g);

}  // namespace parity
