// The one-device reference model of MODEL.md: parameters, gradients, the expert bias,
// and one micro-batch's forward + backward. This run is the baseline every layout must
// reproduce.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "model/route_oracle.h"

namespace parity {

// What one micro-batch produced besides gradients.
struct MicroResult {
  double loss = 0;  // this micro-batch's part of the step loss (ce + aux)
  double ce = 0;    // sum of token cross-entropies / (B*S)
  double aux = 0;   // aux-loss part, all MoE layers
  // the largest |logit| as stored, and the sum of squares of the loss's gradient at the logits (p - onehot, before
  // the 1 / tokens and the loss scale): what the verdict's saturated softmax floor reads (tolerance.h)
  double logit_peak = 0, logit_grad_sq = 0;
  std::vector<std::vector<int64_t>> chosen;             // per MoE layer: (n, K) expert ids
  std::vector<std::vector<int64_t>> tokens_per_expert;  // per MoE layer: (E) assignment counts
  std::vector<std::vector<double>> select_scores;       // per MoE layer: (n, E) s + bias, what top-k ranked
};

template <class T> class Model {
 public:
  Model(const ModelConfig& c, uint64_t seed);

  const ModelConfig& config() const { return cfg_; }
  ParamSet<T> params;                     // registry order (params.h)
  ParamSet<T> grads;                      // same shapes; accumulated by forward_backward
  std::vector<Buffer<T>> expert_bias;  // per MoE layer: (E), updated by the bias rule only
  // Near-tie arbitration (model/route_oracle.h; the rounding twin follows the baseline's
  // routing): the oracle, and the global id of the next micro-batch's first token.
  const RouteOracle* route_oracle = nullptr;
  int64_t route_first_token = 0;
  // fp8-delayed (core/fp8_delayed.h): the amax histories and scales; the forwards set it on their
  // thread and record into it, the step's end (BaselineRun::step) completes it. Off otherwise.
  Fp8Delayed fp8;

  // inputs, targets (b, S) for b whole sequences of the step's B. Adds this micro-batch's
  // gradient of the step loss (normalised by B*S) into grads.
  MicroResult forward_backward(const int64_t* inputs, const int64_t* targets, int64_t b);
  // Forward only: the same loss, no gradient (used by finite-difference tests).
  MicroResult forward(const int64_t* inputs, const int64_t* targets, int64_t b);

 private:
  MicroResult run(const int64_t* inputs, const int64_t* targets, int64_t b, bool backward);
  ModelConfig cfg_;
  // Under a storage policy: the parameters' compute copy, refilled from params by a device copy
  // each micro-batch (on cuda a host copy moved every managed page to the host and back).
  ParamSet<T> compute_copy_;
};

}  // namespace parity
