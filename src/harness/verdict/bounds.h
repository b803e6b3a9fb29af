// The bounds of a verdict's rows, step by step (docs/verdict.md "Bounds"): the rounding
// twin's noise (harness/runner/twin.h measures it) folded into an envelope, the largest noise
// of each row up to the step (rounding grows as the parameters drift apart), and each row held
// to tolerance.h's measured_bound of it. `parity run` (harness/runner/verdict_run) and `parity
// compare` (harness/verdict/dump_compare) both take their bounds from here.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/precision.h"
#include "harness/verdict/tolerance.h"
#include "model/params.h"

namespace parity {

// A step's noise, twin against baseline, in the verdict's own measure for each row:
//   [0] loss            |twin - base| / |base| of the step loss
//   [1] grad_norm       the same of the gradient norm
//   [2, 2+F)            grad FAMILY: ||twin - base|| / ||base|| over the family's gradients
//   [2+F, 2+2F)         param FAMILY: the same over the parameters after the step
//   [2+2F]              expert_bias: the same over every MoE layer's bias after its update
//   [3+2F]              routing: the largest |twin - base| of a selection score (s + bias)
//   [4+2F, 4+3F)        grad FAMILY: the fraction of far elements (tolerance.h is_far)
//   [4+3F, 4+4F)        param FAMILY: the same, of the update (after - before)
// NaN: not measured (the floor decides).
inline constexpr size_t kNoiseWidth = 4 + 4 * kFamilyCount;
enum NoiseIndex : size_t {
  kNoiseLoss = 0,
  kNoiseGradNorm = 1,
  kNoiseGrad = 2,
  kNoiseParam = 2 + kFamilyCount,
  kNoiseBias = 2 + 2 * kFamilyCount,
  kNoiseRoute = 3 + 2 * kFamilyCount,
  kNoiseFarGrad = 4 + 2 * kFamilyCount,
  kNoiseFarParam = 4 + 3 * kFamilyCount
};
// Each index's name, as a dump's manifest records the noise: "loss", "grad_norm",
// "grad.router", "param.head", "expert_bias", "routing", "far.grad.router", "far.param.head".
std::string noise_name(size_t i);

// One step's bounds. Groups are the families a model has, in the order the caller gives.
struct StepBounds {
  Bound loss, grad_norm;              // clip_coef is held to grad_norm's
  std::vector<Bound> grad, param;     // per family group
  Bound expert_bias;
  std::vector<double> grad_far;       // per family group: the fraction of far gradient elements allowed
  std::vector<double> update_far;     // the same of the update (after - before) of the parameters
  double route_tie = 0;               // an absolute score gap under which a differing decision is a near-tie
};

class BoundEnvelope {
 public:
  // families: the model's family groups; elements: each group's global element count.
  // step_local: the step-local verdict's floors (tolerance.h noise_floor).
  BoundEnvelope(const Precision& p, std::vector<Family> families, std::vector<double> elements,
                bool step_local = false);
  // Folds step t's noise (kNoiseWidth values; fewer or empty: the rest unmeasured) and
  // returns this step's bounds.
  const StepBounds& step(const std::vector<double>& noise);
  const StepBounds& current() const { return b_; }
  // Folds noise measured before the first step (a measured-again verdict's whole run: verdict_run.cpp), so
  // that every step's bound is at least what it allows.
  void seed(const std::vector<double>& noise);

 private:
  Precision prec_;
  bool step_local_ = false;
  std::vector<Family> families_;
  std::vector<double> elements_;
  std::vector<double> envelope_;
  StepBounds b_;
};

}  // namespace parity
