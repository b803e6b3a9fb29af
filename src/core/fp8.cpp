#include "core/fp8.h"

#include <algorithm>
#include <vector>

#include "core/fp8_delayed.h"
#include "core/knobs.h"
#include "core/precision.h"

#include <cstdlib>

namespace parity {

namespace {
thread_local const AmaxReduce* tl_split = nullptr;

double knob_ulps(const char* name) {  // for measuring the choice (docs/precision.md "fp8"); -1: unset
  const char* v = knob(name);
  return v != nullptr && *v != '\0' ? std::atof(v) : -1.0;
}
double grad_jitter_ulps(bool delayed) {
  static const double j = knob_ulps("PARITY_FP8_GRAD_JITTER");
  return j >= 0 ? j : delayed ? kFp8DelayedGradJitterUlps : kFp8GradJitterUlps;
}
double row_jitter_ulps() {
  static const double j = knob_ulps("PARITY_FP8_ROW_JITTER");
  return j >= 0 ? j : kFp8GradRowJitterUlps;
}

float amax_of(const float* x, int64_t n) {
  float a = 0;
  for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));  // NaN: not taken (scale from the rest)
  return a;
}
float amax_of(const double* x, int64_t n) {
  double a = 0;
  for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return static_cast<float>(a);
}

// The rounding twin's move at an E5M2 point (n rows of k): first every element by +-row_jitter_ulps()
// fp32 ulps of its row's amax (what a reordered sum leaves: a few ulps of the terms it adds, however
// much of them cancelled), then by +-grad_jitter_ulps() of itself (a part at 0: no pass, no sign drawn). Each sign
// from the sequence a pair of twins shares with opposite signs (core/precision.h jitter_pair_up): a value
// a layout's reordered sum may flip to the other side of an E5M2 tie is flipped by one twin of the pair
// (issue 48f: with independent signs both twins missed a layout's flip of one large gradient element, one
// fp32 ulp from its tie, in 1 of 4 draws).
template <class T> void jitter(T* x, int64_t n, int64_t k, bool from_history) {
  if (!jitter_on()) return;
  if (const double row = row_jitter_ulps() * 0x1p-24; row > 0)
    for (int64_t i = 0; i < n; ++i) {
      const double a = static_cast<double>(amax_of(x + i * k, k)) * row;
      for (int64_t j = i * k; j < (i + 1) * k; ++j)
        x[j] = static_cast<T>(static_cast<double>(x[j]) + (jitter_pair_up() ? a : -a));
    }
  const double ulps = grad_jitter_ulps(from_history), up = 1 + ulps * 0x1p-24, down = 1 - ulps * 0x1p-24;
  for (int64_t i = 0; i < n * k && ulps > 0; ++i)
    x[i] = static_cast<T>(static_cast<double>(x[i]) * (jitter_pair_up() ? up : down));
}

// x * scale in fp32 to fp8, back times fp32(1 / scale): TransformerEngine's scale and scale_inv.
template <class T> void quantize_with(Fp8 f, T* x, int64_t n, float s) {
  const float inv = 1.0f / s;
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(round_fp8(f, static_cast<float>(x[i]) * s) * inv);
}
template <class T> void quantize(Fp8 f, T* x, int64_t n, float amax) { quantize_with(f, x, n, fp8_scale(f, amax)); }

// Delayed scaling (core/fp8_delayed.h): the slot's scale of the step; the amax recorded for its end.
template <class T> void quantize_delayed(Fp8Delayed& d, int64_t slot, Fp8 f, T* x, int64_t n) {
  d.record(slot, amax_of(x, n));
  if (d.fresh(slot)) return;  // no amax yet: recorded, not quantized (fp8_delayed.h fresh)
  quantize_with(f, x, n, d.scale(slot));
}
Fp8Delayed* delayed() {
  Fp8Delayed* d = fp8_delayed();
  return d != nullptr && d->on() ? d : nullptr;
}
}  // namespace

float fp8_scale(Fp8 f, float amax) {
  if (!(amax > 0) || !std::isfinite(amax)) return 1;
  return static_cast<float>(f == Fp8::e4m3 ? kE4m3Max : kE5m2Max) / amax;  // in fp32, as TransformerEngine
}

Fp8SplitScope::Fp8SplitScope(const AmaxReduce* reduce) : saved_(tl_split) { tl_split = reduce; }
Fp8SplitScope::~Fp8SplitScope() { tl_split = saved_; }
const AmaxReduce* fp8_split() { return tl_split; }

bool fp8_on() { return current_precision().fp8; }

template <class T> void fp8_rows(Fp8 f, T* x, int64_t n, int64_t k, bool split) {
  if (!fp8_on()) return;
  Fp8Delayed* d = delayed();
  if (f == Fp8::e5m2) jitter(x, n, k, d != nullptr);  // a gradient: an fp32 sum (E4M3 inputs: storage points)
  if (d != nullptr) return quantize_delayed(*d, fp8_next_slot(f), f, x, n * k);
  std::vector<float> amax(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) amax[static_cast<size_t>(i)] = amax_of(x + i * k, k);
  if (split && tl_split != nullptr && n > 0) (*tl_split)(std::span<float>(amax));
  for (int64_t i = 0; i < n; ++i) quantize(f, x + i * k, k, amax[static_cast<size_t>(i)]);
}

template <class T>
void fp8_tensors(T* w, int64_t blocks, int64_t per, const AmaxReduce* reduce, std::string_view name,
                 int64_t first_block) {
  if (!fp8_on()) return;
  if (Fp8Delayed* d = delayed()) {
    for (int64_t b = 0; b < blocks; ++b)
      quantize_delayed(*d, d->weight_slot(name, first_block + b), Fp8::e4m3, w + b * per, per);
    return;
  }
  std::vector<float> amax(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) amax[static_cast<size_t>(b)] = amax_of(w + b * per, per);
  if (reduce != nullptr) (*reduce)(std::span<float>(amax));
  for (int64_t b = 0; b < blocks; ++b) quantize(Fp8::e4m3, w + b * per, per, amax[static_cast<size_t>(b)]);
}

template void fp8_rows<float>(Fp8, float*, int64_t, int64_t, bool);
template void fp8_rows<double>(Fp8, double*, int64_t, int64_t, bool);
template void fp8_tensors<float>(float*, int64_t, int64_t, const AmaxReduce*, std::string_view, int64_t);
template void fp8_tensors<double>(double*, int64_t, int64_t, const AmaxReduce*, std::string_view, int64_t);

}  // namespace parity
