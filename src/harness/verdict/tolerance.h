// The one tolerance table of the project, keyed by dtype (ARCHITECTURE.md 4). A correct
// layout differs from the baseline only by the order of floating-point sums; every bound
// below is derived from that and carries its derivation.
#pragma once
#include <cmath>

#include "core/precision.h"
#include "core/tensor.h"

namespace parity {

// What is compared. Later quantities have been through more steps, so rounding has had
// more chances to grow; each row says how much.
enum class Quantity { loss, gradient, grad_norm, parameter, routing_score, op_result, golden_curve };

struct Tolerance {
  double norm_rel;  // bound on ||x - ref|| / ||ref|| for a whole tensor or family
  double elem_rel;  // an element is "bad" when |x - ref| > elem_rel * (|ref| + ||ref||_rms)
};

Tolerance tolerance_for(DType dtype, Quantity q);
// The same for a precision policy: its compute dtype's row, except what a 16-bit storage
// policy changes (the loss's floor, and golden curves: see tolerance.cpp).
Tolerance tolerance_for(const Precision& p, Quantity q);

// Measured bounds (docs/verdict.md "Bounds"): a verdict row's bound at a step is
// kTwinFactor times the largest rounding noise the twin (harness/runner/twin.h) showed for that row
// up to that step, and never below the row's floor for the run's precision policy.
inline constexpr double kTwinFactor = 10;
// The second measure of a tensor row (docs/verdict.md "Bounds"): the fraction of its elements
// that are far, |x - ref| > kFarRel * (|ref| + rms / 16), rms over the baseline's whole family. A tensor rounded to
// bf16 has about 3/4 of its elements far (relative errors uniform up to 2^-9 .. 2^-8); rounding noise that a reordered
// sum lets through a 16-bit store flips a few values, and leaves most elements near. Bound: kTwinFactor x the twin's
// fraction, never below kFarFloor.
inline constexpr double kFarRel = 0x1p-11;
// The root line (verdict_root.h) calls a failure "at rounding level" when its rows sit within
// this factor of their bounds, with no clean scale and no far-element excess: what a bound a
// little short of the rounding looks like, not a bug's 10x and more (docs/verdict.md "The root").
inline constexpr double kRoundingLevel = 4;
inline constexpr double kFarFloor = 0.05;
// A fraction over a handful of elements says nothing about "most elements": a LayerNorm of
// dim 1 has six, and one cancellation makes 17%. The measure fails only on at least this
// many far elements.
inline constexpr double kFarMinCount = 16;
inline bool is_far(double x, double ref, double rms) {
  const double d = std::abs(x - ref);
  return !(d <= kFarRel * (std::abs(ref) + rms / 16));
}
double far_bound(double twin_fraction);
struct Bound {
  double value = 0;
  bool from_twin = false;  // false: the floor decided
  double floor = 0;        // the row's floor (noise_floor, widened for few elements): a twin that saw no noise gets it
  double twin = 0;         // kTwinFactor x the twin's noise, before the floor (NaN: not measured)
};
// step_local: the step-local verdict's floors (docs/verdict.md "Step-local and trajectory"): one
// step's rounding from equal parameters, tighter than the trajectory's where the precision lets them be.
double noise_floor(const Precision& p, Quantity q, bool step_local = false);
// elements: the row's element count (a tensor family; 0 for a scalar): below 256 the floor
// grows as sqrt(256 / elements), since a few elements do not average their errors.
Bound measured_bound(const Precision& p, Quantity q, double noise, double elements = 0, bool step_local = false);

}  // namespace parity
