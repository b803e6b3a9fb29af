#include "harness/verdict/tolerance.h"

#include <algorithm>
#include <cmath>

namespace parity {

// Derivation. A sum of n terms in another order differs by at most about
// log2(n) * u * sum|terms| with pairwise-like reductions and n * u in the worst case
// (u = 2^-53 = 1.1e-16 in fp64, 2^-24 = 6.0e-8 in fp32). The reductions parity reorders
// are over ranks and micro-batches (n <= 64 terms per element, a few levels deep through
// the backward), and cancellation in a gradient can magnify the relative error of an
// element by |sum terms| / |sum|; normwise, over a whole tensor, that magnification
// averages out. So:
//  - loss: a scalar from long positive sums: 1e-13 (fp64) = ~1000 u; fp32 1e-5 = ~170 u.
//  - grad norm: the norm of every gradient, so it inherits their error, not a sum's:
//    |‖g + d‖ - ‖g‖| <= ‖d‖, and for rounding noise (nearly orthogonal to g) it is about
//    <g, d> / ‖g‖², a fraction of the normwise ‖d‖ / ‖g‖. It grows with the model as the
//    gradients' error does: measured 1.1e-13 with gradients at 1.1e-12 (dim 128, 4 layers,
//    seq 64 at W = 8, dps 2 x tp 4, ep 8, step 2: 10x ci/bench's dim64 work; it failed the
//    old 1e-13), and 1.13e-5 in fp32 on docs/gpu.md's large model at W = 8. Bound: a tenth
//    of the gradients' normwise bound, 1e-12 (fp64) / 1e-4 (fp32). A replica counted twice
//    moves the norm by half its family's share of the squared norm: this row catches shares
//    above 2e-12 / 2e-4, and clip_coef and the parameters after a clipped step catch it too.
//  - gradients: normwise 1e-11 (fp64, ~1e5 u: depth ~10 ops x 64 terms x cancellation
//    headroom 100). fp32: 1e-3. At step 0 the same reasoning gives ~1e-4 (1700 u), but
//    every later step's gradient is taken at parameters that already differ: Adam's update
//    m / sqrt(v) of an element whose gradient sits at the rounding level is a coin flip of
//    size ~lr, so such elements drift by ~lr per step and the gradients computed from them
//    follow. In fp64 that noise level is 1e-16 and never shows; in fp32 it is 6e-8 x the
//    gradient scale, and the normwise gradient error grows ~10x over the first steps
//    (measured: <= 3e-6 for most layouts over 10 steps, 1.2e-4 for fsdp8_ep8 at step 3).
//    1e-3 still rejects every wrong reduction by orders of magnitude: a doubled or
//    missing one gives a normwise error of 1 - 1/n >= 0.5 over the tensors it touches.
//  - parameters after steps: adam divides by sqrt(v), which turns a relative gradient
//    error e into a relative update error ~e, accumulated over steps: 1e-10 / 1e-3.
//  - routing scores: softmax of logits with the gradient's error: 1e-11 / 1e-4.
//  - golden_curve: a golden's loss / grad_norm / aux loss rerun on another machine
//    (harness/golden/golden.h). Another libm rounds exp/log/tanh differently in the last bit
//    (glibc's are < 1 ulp, not correctly rounded), a perturbation of the same size as a
//    reordered sum, so it grows like the parameters' error: after 50 Adam steps at most
//    ~1e-10 relative (fp64) / 1e-3 (fp32), and the scalars computed from those parameters
//    follow. Measured on the goldens themselves (layout against baseline, 50 steps, every
//    scenario, the same kind of perturbation): see docs/golden.md. A real change in the
//    model or the data moves the loss by >= 1e-6 at step 1 already.
// Element bounds are 1000x looser than normwise (single elements can sit on cancellation)
// and only count elements for the report; the verdict is the normwise bound.
Tolerance tolerance_for(DType dtype, Quantity q) {
  const bool f64 = dtype == DType::f64;
  switch (q) {
    case Quantity::loss: return f64 ? Tolerance{1e-13, 1e-10} : Tolerance{1e-5, 1e-3};
    case Quantity::grad_norm: return f64 ? Tolerance{1e-12, 1e-10} : Tolerance{1e-4, 1e-3};
    case Quantity::gradient: return f64 ? Tolerance{1e-11, 1e-8} : Tolerance{1e-3, 1e-1};
    case Quantity::routing_score: return f64 ? Tolerance{1e-11, 1e-8} : Tolerance{1e-4, 1e-2};
    case Quantity::parameter: return f64 ? Tolerance{1e-10, 1e-7} : Tolerance{1e-3, 1e-1};
    // One op against an independent formula (tests/ops): fp64 sides round differently,
    // each result carries O(len * u) ~ 100 * 1.1e-16 = 1e-14, 1e-12 leaves margin for the
    // O(10) condition numbers of the test inputs; fp32 against the fp64 op on the same
    // fp32-representable inputs: O(len * u32) = 100 * 6e-8 = 6e-6, so 2e-5.
    case Quantity::op_result: return f64 ? Tolerance{1e-12, 1e-12} : Tolerance{2e-5, 2e-5};
    case Quantity::golden_curve: return f64 ? Tolerance{1e-10, 1e-10} : Tolerance{1e-3, 1e-3};
  }
  return {0, 0};
}

}  // namespace parity

namespace parity {

// Floors: the smallest error no measurement of one twin can promise to tell from rounding.
// A twin is one sample of the noise: a quantity its perturbation happened to leave almost
// unchanged (a family few tokens reach, a gradient that is all cancellation) would otherwise
// get a bound below what another order of the same sums gives.
//
// fp64 and fp32: the fixed table above (tolerance_for), so a measured bound is never tighter
// than the table and only widens it where the twin saw more noise (fp32 near-ties and
// drifted parameters: the table cried wolf on ci/bench's dim64 work at W = 8). Floors of
// 64 u (scalars) and 1024 u (tensors) were tried: the shipped matrix passed at 0.19 of them,
// but the fp64 property suite found, in 102 cases of seed 2, a dim-2, vocab-2 model whose
// gradients are nearly all cancellation (1e-10 .. 1e-8 against a loss of ln 2) reordered by
// cp to 3e-12 normwise, 30x over 1024 u, and a 4-element head one ulp off at 1.5e-13. Such
// floors need a cancellation-aware measure (issue 25's sensitivity work), not a constant.
//
// Under a 16-bit storage policy a reordered fp32 sum upstream of a store sometimes flips the
// stored value by one unit of bf16 (2^-8 relative): a flip in one logit, one activation or one
// router score moves the loss and the gradients that every token shares (LayerNorm, the head)
// at once, and a twin's flips are a handful of rare events, not a mean. So under bf16 the
// loss's floor is u_bf16 / 64 (6.1e-5), and the gradients' and the grad norm's u_bf16 / 16
// (2.4e-4; the norm inherits the gradients' error, and 7.0e-5 was measured on ten shipped
// layouts at step 8, against a twin that saw none): a tensor rounded to bf16 is still 4x
// above it normwise (~1.1e-3), and its far elements (3/4 of them against a 5% floor) are
// what names it; a family missing from the norm fails the norm's parts (harness/runner/verdict_run.cpp).
namespace {
// fp32 under the step-local verdict. Each step starts from the baseline's parameters, so a row
// carries one step's rounding and never the drift of earlier steps that the table above
// allows for (its 1e-3 for parameters is ten steps of Adam's coin flips). Measured with
// `ci/calibrate --rows` (800 fp32 runs, half of them the property generator's layouts and tiny
// models, seed 2027): the loss moved by at most 4.2e-7 (7 u) and the parameters by at most
// 2.8e-5, each at under a third of the floors below; the gradients reached 9.1e-3 on a dim-2
// model that is all cancellation, and with their floor a quarter of 1e-3 one run in 800
// failed, so they keep the table's. Loss 2e-6 (34 u), parameters 1.5e-4.
double step_local_f32(Quantity q) {
  if (q == Quantity::loss) return 2e-6;
  if (q == Quantity::parameter) return 1.5e-4;
  return tolerance_for(DType::f32, q).norm_rel;
}
}  // namespace

double noise_floor(const Precision& p, Quantity q, bool step_local) {
  if (step_local && p.store == Low::none && p.compute == DType::f32) return step_local_f32(q);
  if (p.store == Low::none) return tolerance_for(p.compute, q).norm_rel;
  const double u = unit_roundoff(p);  // 2^-8, bf16's
  if (q == Quantity::loss) return u / 64;
  if (q == Quantity::gradient || q == Quantity::grad_norm || q == Quantity::routing_score) return u / 16;
  return 1024 * unit_roundoff({p.compute, Low::none, Low::none});  // parameters, the expert bias: fp32 masters (6.1e-5)
}

// A bf16 golden rerun elsewhere: another libm moves a value by an fp32 ulp, which flips bf16
// roundings downstream as a layout's reordered sums do; over a golden's 50 steps the layouts
// of the shipped matrix moved the loss by up to MEASURED (docs/golden.md), so 1e-2.
Tolerance tolerance_for(const Precision& p, Quantity q) {
  if (p.store == Low::bf16 && q == Quantity::golden_curve) return {1e-2, 1e-2};
  if (p.store == Low::bf16 && q == Quantity::loss) return {noise_floor(p, q), 1e-2};
  // fp16 (issue 48): bf16's rows, from its own unit roundoff 2^-11 (noise_floor: the loss u / 64,
  // gradients u / 16, parameters fp32 masters' 1024 u); its golden curves as bf16's (not measured)
  if (p.store == Low::fp16 && q == Quantity::golden_curve) return {1e-2, 1e-2};
  if (p.store == Low::fp16 && q == Quantity::loss) return {noise_floor(p, q), 1e-2};
  return tolerance_for(p.compute, q);
}

// fp8 current scaling (issue 48f, its only change here): four pairs of twins where flips are few, each pair's E5M2
// moves opposite (core/precision.h jitter_pair_up). With one pair and no element part in the E5M2 jitter,
// ci/calibrate --precision fp8 seed 48411 had 1 false alarm in 1000 (cal 619: one pair missed a flip at 3 of 7
// twin streams, two pairs at none) and cal 3335 of seed 48321 failed at 1 of 6 streams. With two pairs seed 52001
// had 2 in 3000 (a flip the layout took and no twin did: harness/cases/fp8_current_*_twin_miss.json); with four
// pairs seed 55001 had 0 in 3000, the fsdp4 case passes at every stream 0..8 and the w8 one at 1..8, and the
// fp8 zoo's smallest separation stays 11.6x. The cost: twice the twins' work in fp8 runs of few values (the
// shipped fp8_tp2_sp's time to verdict about 0.45 -> 0.8 s on the loaded 2-core VM).
constexpr int64_t kFp8TwinsWhereFlipsAreFew = 8;
// fp8 delayed scaling: one pair where flips are few, and a failure at rounding level measured again by four pairs
// (twin_sets_again). With one pair ci/calibrate seed 52001's cal20037 (tp 2, dim 16, adamw;
// harness/cases/fp8_delayed_tp2_twin_miss.json) failed at twin stream 0: grad router at step 11, 1.66e-2 against
// 4.3e-3, one flip in an expert's input the layout took and neither twin did; with two pairs it passes at every
// stream 0..8, and seed 59001's cal01011 (fp8_delayed_ds_w8_tp2_ep4_twin_miss.json) needs four. The sixteenth round
// took two pairs for every fp8-delayed run of few values instead: that cost tp_reduce_in_bf16 (a bf16 rounding of
// TP partial sums, inside the noise of a policy whose flips move elements by E4M3's 6-12%) its separation, 12.1x to
// 9.7x (one element of 160 a third twin moved far raised the far bound), and every such run twice the twins' work.
// Measured again, only the runs that fail at rounding level pay for the larger ensemble, and a bug beyond
// kRoundingLevel is judged by the pair alone (the nineteenth round).
constexpr int64_t kFp8DelayedTwinsWhereFlipsAreFew = 2;
constexpr int64_t kFp8DelayedTwinSetsAgain = 4;

int64_t twin_count(const Precision& p, double step_values) {
  if (p.store == Low::fp16 && step_values <= kFewestTwinValues) return kTwinsWhereFlipsAreFewest;
  if (p.fp8 && step_values <= kFewTwinValues)
    return p.fp8_delayed ? kFp8DelayedTwinsWhereFlipsAreFew : kFp8TwinsWhereFlipsAreFew;
  return p.store != Low::none && step_values <= kFewTwinValues ? kTwinsWhereFlipsAreFew : 1;
}

// bf16 storage (bf16, bf16-reduce-bf16): a failure at rounding level measured again by two sets. ci/calibrate
// seed 66001's cal02552 (w4_tp2_ep4, dim 16, 64 tokens: two twins) failed in both policies at twin streams 0-2 and
// 7-9 of 0..11: grad routed_experts at step 0, 5.1e-4 against 3.2e-4, one router score a bf16 ulp apart (0.163 and
// 0.162) moving one token's share of an expert's gradient, a flip neither twin took.
constexpr int64_t kBf16TwinSetsAgain = 2;

int64_t twin_sets_again(const Precision& p) {
  if (p.fp8) return p.fp8_delayed ? kFp8DelayedTwinSetsAgain : 2;
  return p.store == Low::bf16 ? kBf16TwinSetsAgain : 1;
}

bool floors_first(const Precision& p) {
  return p.store == Low::none && p.reduce == Low::none && !p.fp8 && !p.fp8_delayed;
}

double far_bound(double twin_fraction) {
  return std::isnan(twin_fraction) ? kFarFloor : std::max(kFarFloor, kTwinFactor * twin_fraction);
}

// A family of few elements does not average its elements' errors: one element summed with
// cancellation carries the normwise error. Below kFewElements elements the floor grows as
// sqrt(kFewElements / n) (a 4-element head of a dim-2 model: 8x; fp64 property case 102 of
// seed 2 failed at 1.5e-13 against 1.1e-13 on one ulp of one element).
constexpr double kFewElements = 256;

double few_token_floor(const Precision& p, double tokens) {
  if (p.store == Low::none || !(tokens > 0)) return 0;
  return 4 * unit_roundoff(p) / tokens;
}

double saturation_floor(const Precision& p, double logit_peak, double logit_grad_rms) {
  if (!(logit_peak > 0) || !(logit_grad_rms > 0)) return 0;
  return kSaturationUlps * unit_roundoff({p.compute, Low::none, Low::none}) * logit_peak / logit_grad_rms;
}

Bound gradient_row_bound(const Precision& p, Bound b, const GradientScale& s) {
  if (!(s.elements > 0) || !(s.model_n > 0)) return b;
  const double rms = std::sqrt(s.family_sq / s.elements);
  const double mag = gradient_magnitude(rms, std::sqrt(s.model_sq / s.model_n));
  // relative to the family's own norm, or absolute (x sqrt(elements)) where that norm is zero
  const double dead = !(mag > rms) ? 1.0 : rms > 0 ? mag / rms : mag * std::sqrt(s.elements);
  const double floor = std::max(b.floor * dead, rms > 0 ? std::max(few_token_floor(p, s.tokens),
                                                                 saturation_floor(p, s.logit_peak, s.logit_grad_rms))
                                                        : 0.0);
  if (!(floor > b.floor) && rms > 0) return b;  // a zero family's bound is absolute: always the model's
  b.widened = b.floor > 0 ? floor / b.floor : 1.0;
  b.floor = floor;
  b.from_twin = b.twin > b.floor;
  b.value = b.from_twin ? b.twin : b.floor;
  return b;
}

Bound measured_bound(const Precision& p, Quantity q, double noise, double elements, bool step_local) {
  const double few = elements > 0 && elements < kFewElements ? std::sqrt(kFewElements / elements) : 1.0;
  const double floor = noise_floor(p, q, step_local) * few, twin = kTwinFactor * noise;
  if (std::isnan(noise) || twin > floor) return {std::isnan(noise) ? floor : twin, !std::isnan(noise), floor, twin};
  return {floor, false, floor, twin};
}

Bound trace_bound(const Precision& p, double elements, double noise, double param_bound, bool step_local) {
  Bound b = measured_bound(p, Quantity::gradient, noise, elements, step_local);
  if (param_bound > b.value) b.value = param_bound, b.from_twin = true;
  return b;
}

}  // namespace parity
