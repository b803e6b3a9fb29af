// The rounding twin (issue 24, docs/verdict.md "Bounds"): the one-device baseline trained a
// second time beside itself, in the same precision policy, with a different valid order of
// its sums and its inputs moved at the unit roundoff:
//   - every parameter moved by one unit in the last place of the compute dtype, up or down
//     by a fixed pseudo-random sign (what a reordered sum leaves in a parameter);
//   - micro-batches of one sequence each: the gradients accumulate in another order (what
//     data parallelism does to them);
//   - under a 16-bit storage policy, every value reaching a storage point moved by one ulp of
//     the compute dtype before it is rounded (core/precision.h JitterScope), so the twin's
//     16-bit roundings flip as often as a layout's, whose sums upstream were reordered;
//   - under a policy that reduces gradients in 16 bits (bf16-reduce-bf16) the twin still
//     rounds its gradient once, as the baseline does: what a layout's reductions may round
//     is allowed analytically beside the twin's bound (tolerance.h with_reduction), and what
//     a rounded gradient does to Adam's update by the param row's explained update
//     (tolerance.h with_explained). Under the step-local verdict its gradient noise is measured
//     before that rounding, as the grad rows compare then (StepRecord::grads_exact). Until the
//     fifth round three twins rounded partial sums over sequences here; with those two
//     allowances they only loosened the bounds (issue 41, docs/precision.md).
// Per step, the twin's distance to the baseline, in the verdict's own measure for each row,
// is the rounding noise of that very run; a row's bound is a factor times it
// (harness/verdict/tolerance.h measured_bound). Nothing of a layout enters it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "harness/runner/baseline.h"
#include "harness/verdict/bounds.h"
#include "model/params.h"

namespace parity {

// A step's noise (kNoiseWidth values, harness/verdict/bounds.h names them): what the verdict's
// rows measure, twin against baseline.

// Every element of ts moved one ulp of T up or down, the sign from a counter hash of (seed, element):
// the twin's parameters (also the traced step's twin, harness/runner/trace_run.h).
template <class T> void perturb(std::vector<Tensor<T>>& ts, uint64_t seed);

// The twin's scenario: s with one sequence per micro-batch.
Scenario twin_scenario(const Scenario& s);

// An ensemble of twin_count() twins (tolerance.h), each with its own pseudo-random sequences; a
// step's noise is each value's largest over them: one twin is one sample of which values flip,
// and where flips are few (a small model under a 16-bit policy) one sample may see none of
// those a layout shows (issue 41: 2 of 10 sequences missed a flip that 8 saw, 5x more noise).
// Scenario::twin_sets 0 (floors first, tolerance.h): no twin; every step's noise unmeasured (NaN: the floors decide).
template <class T> class TwinRun {
 public:
  explicit TwinRun(const Scenario& s);
  ~TwinRun();
  // Trains step t and returns its noise against the baseline's record of step t and the
  // baseline's parameters before and after it and its biases after it.
  std::vector<double> step(int64_t t, const StepRecord<T>& base, const std::vector<Tensor<T>>& base_before,
                           const std::vector<Tensor<T>>& base_params, const std::vector<Buffer<T>>& base_bias);
  void skip(int64_t t);  // trains step t, compares nothing (a resumed run's replayed steps)
  // The step-local verdict (docs/verdict.md): the next step starts from the baseline's
  // parameters (each moved one ulp, as at the start) and expert bias; the twin's optimizer
  // state stays its own, as a layout's does.
  void start_from(const std::vector<Tensor<T>>& params, const std::vector<Buffer<T>>& bias);

 private:
  std::vector<std::unique_ptr<BaselineRun<T>>> runs_;
  std::vector<uint64_t> streams_;  // each run's sequence (core/precision.h twin_stream, + its index)
  std::vector<double> model_sq_peak_;  // the baseline's largest squared gradient norm so far (is_far's model scale)
};

}  // namespace parity
