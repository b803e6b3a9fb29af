// Precision policies (docs/precision.md): what a run stores in 16 bits and where it rounds.
// A policy names the compute dtype (fp64 or fp32: every accumulation, the master weights and
// the optimizer state) and, for the mixed policies, a 16-bit storage format: bf16
// parameters' compute copy and activations, and the dtype gradient reductions run in.
//
// bf16 values are held in fp32 containers, rounded to the nearest bf16 (ties to even) at
// every point where a bf16 tensor would be stored. Every bf16 is exactly an fp32 and every
// operation on them is an fp32 one, so the values are those of 16-bit storage with fp32
// arithmetic (tensor cores' bf16 x bf16 -> fp32); only the memory is not halved. fp16 (IEEE
// binary16) the same way, at the same points, with the loss scaled (optim/loss_scaler.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace parity {

enum class Low { none, bf16, fp16 };  // a 16-bit storage format, or none (the compute dtype)

struct Precision {
  DType compute = DType::f64;  // accumulations, master weights, optimizer state
  Low store = Low::none;       // parameters' compute copy and activations
  Low reduce = Low::none;      // gradient reductions over ranks (none: the compute dtype)
  bool fp8 = false;            // the matmul inputs quantized to fp8 (core/fp8.h), on top of the storage
  bool fp8_delayed = false;    // fp8's scales from an amax history (delayed scaling, core/fp8_delayed.h)
  bool operator==(const Precision&) const = default;
};

// "fp64", "fp32", "bf16" (bf16 storage, fp32 compute, fp32 reductions), "bf16-reduce-bf16" or
// "fp16" (fp16 storage, fp32 compute and reductions, dynamic loss scaling) or "fp8" (bf16's, with every
// linear's inputs quantized to E4M3 and its output gradient to E5M2, core/fp8.h, current scaling) or
// "fp8-delayed" (the same points, each tensor's scale from its amax history, core/fp8_delayed.h); parse_precision
// throws ConfigError(path, rule) on anything else.
std::string precision_name(const Precision& p);
Precision parse_precision(std::string_view name, const std::string& path);
// The policy's unit roundoff at its storage points: 2^-53, 2^-24, 2^-8 (bf16 and fp8: its storage
// points are bf16's; the fp8 roundings' effect is the twin's to measure), 2^-11 (fp16).
double unit_roundoff(const Precision& p);
// "bf16", "fp16", or the compute dtype's name for Low::none.
std::string_view low_name(Low l, DType compute);
// Whether the policy scales the loss (fp16: dynamic loss scaling, optim/loss_scaler.h).
inline bool scales_loss(const Precision& p) { return p.store == Low::fp16; }

// Round to the nearest bf16 (ties to even); NaN stays NaN (quiet), infinities stay.
inline float round_bf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  if ((b & 0x7f800000u) == 0x7f800000u) {  // inf or NaN
    if (b & 0x007fffffu) b |= 0x00400000u;  // NaN: keep it a (quiet) NaN after truncation
    b &= 0xffff0000u;
  } else {
    b += 0x7fffu + ((b >> 16) & 1u);
    b &= 0xffff0000u;
  }
  float y;
  std::memcpy(&y, &b, sizeof y);
  return y;
}
inline double round_bf16(double x) { return static_cast<double>(round_bf16(static_cast<float>(x))); }

// Round to the nearest IEEE binary16 (ties to even), as a float: 11 significant bits, normal
// numbers from 2^-14, subnormals down to 2^-24 (a quantum of 2^-24 below 2^-14), and every
// magnitude from 65520 up (the tie between 65504, the largest, and 2^16) to infinity, sign
// kept; NaN stays NaN, infinities stay, a value that rounds to zero keeps its sign. Computed
// in double: |x| / quantum is exact (a power-of-two scaling) and rint rounds ties to even
// under the default rounding mode.
inline float round_fp16(float x) {
  if (!std::isfinite(x)) return x;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return std::copysign(std::numeric_limits<float>::infinity(), x);
  int e = 0;
  (void)std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): the binade's quantum is 2^(e - 11)
  const double q = std::ldexp(1.0, std::max(e - 11, -24));
  return static_cast<float>(std::copysign(std::rint(a / q) * q, static_cast<double>(x)));
}
inline double round_fp16(double x) { return static_cast<double>(round_fp16(static_cast<float>(x))); }

// Round n values in place to `low` (a no-op for Low::none).
template <class T> void round_to(Low low, T* x, int64_t n) {
  if (low == Low::none) return;
  if (low == Low::fp16) {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(round_fp16(x[i]));
    return;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(round_bf16(x[i]));
}

// The policy of the run on this thread: the baseline, its twin and a rank each set theirs
// (PrecisionScope), and the model's storage points read it. Default: no 16-bit storage.
const Precision& current_precision();
class PrecisionScope {
 public:
  explicit PrecisionScope(const Precision& p);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision saved_;
};

// The loss scale of the step on this thread (fp16's dynamic loss scaling, optim/loss_scaler.h):
// the seeds of the backward (cross-entropy's gradient, the aux loss's coefficient) are multiplied
// by it; 1 outside a LossScaleScope. The losses the forward reports stay unscaled.
double current_loss_scale();
class LossScaleScope {
 public:
  explicit LossScaleScope(double scale);
  ~LossScaleScope();
  LossScaleScope(const LossScaleScope&) = delete;
  LossScaleScope& operator=(const LossScaleScope&) = delete;

 private:
  double saved_;
};

// Which of the twin's pseudo-random sequences (its parameters' ulp signs, its storage jitter): 0, or
// PARITY_TWIN_STREAM (measuring how much one twin's sample of the flips varies; docs/verdict.md).
uint64_t twin_stream();

// The rounding twin (harness/runner/twin.h) on this thread: every value reaching a storage point is
// first moved by one unit in the last place of the compute dtype, up or down by a fixed
// pseudo-random sequence, as a reordered sum upstream would move it, so the twin's 16-bit
// roundings flip as often as a layout's do.
class JitterScope {
 public:
  // stream: which sign sequence (a twin of an ensemble each its own, harness/runner/twin.h)
  explicit JitterScope(uint64_t stream = twin_stream());
  ~JitterScope();
  JitterScope(const JitterScope&) = delete;
  JitterScope& operator=(const JitterScope&) = delete;
};
bool jitter_on();
double jitter_ulps();  // how far: PARITY_TWIN_JITTER ulps of fp32 (default kJitterUlps)
// 8: a tensor-parallel lane's partial sums, added after the matmul, move a stored value by more
// than 4 ulps, so a twin at 4 saw too few flips: 8 of 13 bf16 false alarms of issue 41's
// calibration (grad rows 1.1x to 2.1x their floor, the twin 20x and more under the layout) pass
// at 8 with every zoo bug's separation unchanged (the smallest 12.1x); at 16 tp_reduce_in_bf16
// falls to 5.1x and one bug is misnamed (docs/verdict.md "Bounds").
inline constexpr double kJitterUlps = 8;
bool jitter_up();  // the next sign of the sequence
// The next sign of a sequence the twins of streams 2k and 2k + 1 share, every sign of the odd one's
// negated, restarted where jitter_up()'s is; fp8's E5M2 points only (core/fp8.cpp jitter): of two twins
// that quantize the same values in the same order, one moves each value up and the other down, so a value
// near an E5M2 tie, which a layout's reordered sum may flip, flips in one of them (issue 48f).
bool jitter_pair_up();

// The loss's gradient at the logits where the policy stores none (bf16 and the fp8 policies keep it in
// the compute dtype; fp16 rounds it at to_grad_storage, whose jitter covers it): under the rounding twin
// every value moved by kLossGradJitterUlps of fp32 (relative, as to_storage moves a value), up or down by a
// sequence of its own (the storage points' signs stay as they were). A layout computes this gradient by
// another formula (parallel/tp_ops.cpp: exp(z - max) / sum over vocab-parallel lanes, against the
// baseline's exp(z - lse)), an fp32 ulp or two apart, and nothing of the twin reaches it: its parameters'
// ulps and its storage jitter are erased where the logits are rounded to bf16. Where the tokens' gradients
// cancel (a dim-2 model at its fixed point: two tokens of one id whose targets differ, p - onehot of
// +-0.5 summing to 1e-4) that ulp became 0.9% of the embedding's gradient against a twin that measured 0
// (issue 41, docs/verdict.md "Bounds").
inline constexpr double kLossGradJitterUlps = 2;
void jitter_loss_gradient(float* x, int64_t n);
void jitter_loss_gradient(double* x, int64_t n);

// A storage point: rounds an activation or a parameter's compute copy to `low` (a parameter's
// is its plan entry's compute_copy, parallel/param_plan.h), jittered under the rounding twin.
template <class T> void to_storage(Low low, T* x, int64_t n) {
  if (low == Low::none) return;
  if (jitter_on()) {
    const double up = 1 + jitter_ulps() * 0x1p-24, down = 1 - jitter_ulps() * 0x1p-24;
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<double>(x[i]) * (jitter_up() ? up : down));
  }
  round_to(low, x, n);
}
// An activation's storage point: the current policy's storage format.
template <class T> void to_storage(T* x, int64_t n) { to_storage(current_precision().store, x, n); }

// A storage point of the backward: the loss's gradient where it enters the network (the
// head's logits' gradient, an fp16 tensor under fp16 autocast), rounded to fp16 after the loss
// scale multiplied it, jittered under the twin like to_storage. Only fp16 has one: bf16 keeps
// every gradient in fp32 (docs/precision.md), and so is unchanged by it.
template <class T> void to_grad_storage(T* x, int64_t n) {
  if (current_precision().store == Low::fp16) to_storage(x, n);
}

}  // namespace parity
