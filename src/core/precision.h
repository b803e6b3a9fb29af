// Precision policies (docs/precision.md): what a run stores in 16 bits and where it rounds.
// A policy names the compute dtype (fp64 or fp32: every accumulation, the master weights and
// the optimizer state) and, for the mixed policies, a 16-bit storage format: bf16
// parameters' compute copy and activations, and the dtype gradient reductions run in.
//
// bf16 values are held in fp32 containers, rounded to the nearest bf16 (ties to even) at
// every point where a bf16 tensor would be stored. Every bf16 is exactly an fp32 and every
// operation on them is an fp32 one, so the values are those of 16-bit storage with fp32
// arithmetic (tensor cores' bf16 x bf16 -> fp32); only the memory is not halved.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace parity {

enum class Low { none, bf16 };  // a 16-bit storage format, or none (the compute dtype)

struct Precision {
  DType compute = DType::f64;  // accumulations, master weights, optimizer state
  Low store = Low::none;       // parameters' compute copy and activations
  Low reduce = Low::none;      // gradient reductions over ranks (none: the compute dtype)
  bool operator==(const Precision&) const = default;
};

// "fp64", "fp32", "bf16" (bf16 storage, fp32 compute, fp32 reductions) or
// "bf16-reduce-bf16"; parse_precision throws ConfigError(path, rule) on anything else.
std::string precision_name(const Precision& p);
Precision parse_precision(std::string_view name, const std::string& path);
// The policy's unit roundoff at its storage points: 2^-53, 2^-24, 2^-8 (bf16).
double unit_roundoff(const Precision& p);

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

// Round n values in place to `low` (a no-op for Low::none).
template <class T> void round_to(Low low, T* x, int64_t n) {
  if (low == Low::none) return;
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

// The rounding twin (harness/runner/twin.h) on this thread: every value reaching a storage point is
// first moved by one unit in the last place of the compute dtype, up or down by a fixed
// pseudo-random sequence, as a reordered sum upstream would move it, so the twin's 16-bit
// roundings flip as often as a layout's do.
class JitterScope {
 public:
  JitterScope();
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

// A storage point: rounds an activation or a parameter's compute copy to the current
// policy's storage format.
template <class T> void to_storage(T* x, int64_t n) {
  const Low low = current_precision().store;
  if (low == Low::none) return;
  if (jitter_on()) {
    const double up = 1 + jitter_ulps() * 0x1p-24, down = 1 - jitter_ulps() * 0x1p-24;
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<double>(x[i]) * (jitter_up() ? up : down));
  }
  round_to(low, x, n);
}

}  // namespace parity
