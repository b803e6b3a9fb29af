// The fp8 policy's quantization (docs/precision.md "fp8"): OCP FP8 E4M3 (the "fn" variant: no
// infinity, max 448) for the matmul inputs of the forward, E5M2 (max 57344) for the output
// gradients of the backward, emulated exactly in fp32 containers: a quantize-dequantize, then
// the ordinary fp32 matmul (tensor cores' fp8 x fp8 -> fp32), so the one-device baseline and every
// layout quantize at the same points with the same scales.
//
// Scaling (TransformerEngine's current scaling): scale = max / amax in fp32, the value x * scale
// (fp32) rounded to fp8, dequantized times fp32(1 / scale). Not a power of two: with one, E4M3's
// grid is scale-invariant for normal numbers and a wrong amax would change only the subnormals. The
// amax is per row for activations and output gradients (one token: torchao "rowwise"), per tensor
// for weights (one expert's matrix for the routed experts; current scaling). Where a layout splits
// a row (the input of a row-parallel linear, the output gradient of a column-parallel one) or a
// weight (TP, ETP), the amax is the max over the lanes that hold its pieces (Fp8SplitScope); the
// one-device run is the definition.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string_view>

namespace parity {

enum class Fp8 { e4m3, e5m2 };

inline constexpr double kE4m3Max = 448.0;    // 1.75 x 2^8
inline constexpr double kE5m2Max = 57344.0;  // 1.75 x 2^15

// Round to the nearest value of the format, ties to even; finite values beyond the largest
// saturate to it (sign kept); normal numbers from 2^-6 (E4M3) / 2^-14 (E5M2), subnormals below
// with a quantum of 2^-9 / 2^-16 (gradual underflow; a value that rounds to zero keeps its sign);
// NaN stays NaN and an infinity stays an infinity (a broken run stays visibly broken, as the
// fp16 policy's found-inf check wants it; E4M3 itself has no infinity). Computed in double:
// |x| over its binade's quantum is exact and rint rounds ties to even.
inline double round_fp8(Fp8 f, double x) {
  if (!std::isfinite(x)) return x;
  const int mant = f == Fp8::e4m3 ? 3 : 2, min_exp = f == Fp8::e4m3 ? -6 : -14;
  const double top = f == Fp8::e4m3 ? kE4m3Max : kE5m2Max;
  const double a = std::fabs(x);
  int e = 0;
  (void)std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): the quantum is 2^(e - 1 - mant), at least the subnormals'
  const double q = std::ldexp(1.0, std::max(e - 1, min_exp) - mant);
  const double r = std::min(std::rint(a / q) * q, top);
  return std::copysign(r, x);
}
inline float round_fp8(Fp8 f, float x) { return static_cast<float>(round_fp8(f, static_cast<double>(x))); }

// The scale that maps amax to the format's largest value, max / amax in fp32; 1 for an amax of 0 or
// one that is not finite (the values then pass as they are).
float fp8_scale(Fp8 f, float amax);

// How a layout completes an amax a lane holds only part of: the max over the lanes that hold the
// rest of the row or the weight, in place. The baseline has none (every row and weight whole).
using AmaxReduce = std::function<void(std::span<float>)>;

// The reduction of the block running on this thread (thread-local, like PrecisionScope): the
// layout sets its TP group around the attention and FFN blocks and the ETP group around the
// routed experts; outside every scope an amax is local.
class Fp8SplitScope {
 public:
  explicit Fp8SplitScope(const AmaxReduce* reduce);
  ~Fp8SplitScope();
  Fp8SplitScope(const Fp8SplitScope&) = delete;
  Fp8SplitScope& operator=(const Fp8SplitScope&) = delete;

 private:
  const AmaxReduce* saved_;
};
const AmaxReduce* fp8_split();

// The twin's jitter at the E5M2 points (docs/precision.md "fp8", the twin at its E5M2 points): every
// element moved by +-kFp8GradRowJitterUlps fp32 ulps of its row's amax, then, under delayed scaling, by
// +-kFp8DelayedGradJitterUlps ulps of itself (kFp8GradJitterUlps, 0, under current scaling;
// PARITY_FP8_ROW_JITTER and PARITY_FP8_GRAD_JITTER override them; a part at 0 draws no sign). Each sign
// from the sequence a pair of twins shares, the second's negated (core/precision.h jitter_pair_up): a
// value a layout may flip across an E5M2 tie flips in one twin of the pair. A layout's gradient at an E5M2
// point is an fp32 sum in another order (a TP or SP reduction of partial input gradients): it differs
// from one device's by a few ulps of the terms, many of its own ulps where they cancelled, so the move
// scales with the row. Until issue 48e: 2048 ulps of the element alone, which flipped E5M2 roundings of
// large elements no layout flipped (fp8's zoo smallest separation 3.26x). Issue 48e: 4 of the row and 256
// of the element, independent signs: 4 false alarms in 3000 draws, each a layout's flip both twins missed
// (cal02838 of fp8-delayed: one element of wo's output gradient 1 fp32 ulp from its tie). Issue 48f: with
// the pair, 256 of the element made a bug's bound a large element's flip (qk_norm_not_summed_tp 4.12x),
// and 0 keeps it 189x; delayed scaling keeps 1024 (fp8_delayed_pp2_dp2_ep2_dim2 failed at 0 with one pair).
// Measured since the second pair (issue 48, seventeenth round): 1024 is held from above by the zoo (16384:
// gather_backward_drops_peers separated 2.45x, tp_reduce_in_bf16 1.31x), and from below by nothing a case
// shows: every fp8_delayed case passes at 0 and at 64 (twin streams 0..3), and at 64 the zoo is unchanged
// (smallest 9.7x) and 800 drawn runs (seed 59001) gave no false alarm, nor at 0 (their worst row 0.57 of its
// bound at 0, 0.29 at 64).
inline constexpr double kFp8GradRowJitterUlps = 4;
inline constexpr double kFp8GradJitterUlps = 0;
inline constexpr double kFp8DelayedGradJitterUlps = 1024;

// Whether the policy of this thread quantizes matmul inputs to fp8 (core/precision.h).
bool fp8_on();

// Quantize-dequantize x (n rows of k) in place, each row with its own scale from its amax; `split`:
// the row's other columns are on other lanes (the amax reduced by fp8_split()). A no-op unless
// fp8_on(). Under the rounding twin an E5M2 gradient is first jittered as at a storage point (it is an
// fp32 sum); E4M3's inputs come from bf16 storage points, jittered there already (and a bf16 value on
// an fp8 tie would flip at every jitter, where a layout's equal value never does).
template <class T> void fp8_rows(Fp8 f, T* x, int64_t n, int64_t k, bool split);
// Quantize-dequantize `blocks` tensors of `per` values each (a weight, or each routed expert's
// matrix) in place, each with the scale of its amax; `reduce`: the max over the lanes holding the
// tensor's other pieces (null: whole here). A no-op unless fp8_on().
// Under delayed scaling (core/fp8_delayed.h, a state on the thread) both quantize with their slot's
// scale of the step and record their amax for the step's end instead (no reduction here): fp8_rows
// the whole (n, k) block as one piece of its tensor at the next slot of the thread's site, fp8_tensors
// weight `name`'s blocks first_block, first_block + 1, ... (the routed experts' global indices).
template <class T>
void fp8_tensors(T* w, int64_t blocks, int64_t per, const AmaxReduce* reduce, std::string_view name = {},
                 int64_t first_block = 0);

}  // namespace parity
