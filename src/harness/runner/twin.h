// The rounding twin (issue 24, docs/verdict.md "Bounds"): the one-device baseline trained a
// second time beside itself, in the same precision policy, with a different valid order of
// its sums and its inputs moved at the unit roundoff:
//   - every parameter moved by one unit in the last place of the compute dtype, up or down
//     by a fixed pseudo-random sign (what a reordered sum leaves in a parameter);
//   - micro-batches of one sequence each: the gradients accumulate in another order (what
//     data parallelism does to them);
//   - under a 16-bit storage policy, every value reaching a storage point moved by one ulp of
//     the compute dtype before it is rounded (core/precision.h JitterScope), so the twin's
//     16-bit roundings flip as often as a layout's, whose sums upstream were reordered.
// Per step, the twin's distance to the baseline, in the verdict's own measure for each row,
// is the rounding noise of that very run; a row's bound is a factor times it
// (harness/verdict/tolerance.h measured_bound). Nothing of a layout enters it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "harness/runner/baseline.h"
#include "model/params.h"

namespace parity {

// A step's noise: what the verdict's rows measure, twin against baseline.
//   [0] loss            |twin - base| / |base| of the step loss
//   [1] grad_norm       the same of the gradient norm
//   [2, 2+F)            grad FAMILY: ||twin - base|| / ||base|| over the family's gradients
//   [2+F, 2+2F)         param FAMILY: the same over the parameters after the step
//   [2+2F]              expert_bias: the same over every MoE layer's bias after its update
//   [3+2F]              routing: the largest |twin - base| of a selection score (s + bias)
//   [4+2F, 4+3F)        grad FAMILY: the fraction of far elements (harness/verdict/tolerance.h is_far)
//   [4+3F, 4+4F)        param FAMILY: the same, of the update (after - before)
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

// The twin's scenario: s with one sequence per micro-batch.
Scenario twin_scenario(const Scenario& s);

template <class T> class TwinRun {
 public:
  explicit TwinRun(const Scenario& s);
  ~TwinRun();
  // Trains step t and returns its noise against the baseline's record of step t and the
  // baseline's parameters before and after it and its biases after it.
  std::vector<double> step(int64_t t, const StepRecord<T>& base, const std::vector<Tensor<T>>& base_before,
                           const std::vector<Tensor<T>>& base_params, const std::vector<Buffer<T>>& base_bias);
  void skip(int64_t t);  // trains step t, compares nothing (a resumed run's replayed steps)

 private:
  std::unique_ptr<BaselineRun<T>> run_;
};

}  // namespace parity
