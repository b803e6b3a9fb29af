// Deterministic test data: a SplitMix64 generator (the same numbers on every platform,
// unlike std:: distributions) and helpers to draw vectors and indices.
#pragma once
#include <cstdint>
#include <vector>

namespace parity::test {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi), 53 random bits.
  double uniform(double lo = -1.0, double hi = 1.0) {
    const double u = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
    return lo + (hi - lo) * u;
  }
  // Uniform integer in [0, bound), bound > 0.
  int64_t index(int64_t bound) { return static_cast<int64_t>(next_u64() % static_cast<uint64_t>(bound)); }

  std::vector<double> vec(int64_t n, double lo = -1.0, double hi = 1.0) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = uniform(lo, hi);
    return v;
  }
  std::vector<int64_t> indices(int64_t n, int64_t bound) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t& x : v) x = index(bound);
    return v;
  }

 private:
  uint64_t state_;
};

// Rounds every element to fp32 and back, so fp32 and fp64 runs see the same inputs.
inline std::vector<double> round_to_f32(std::vector<double> v) {
  for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

}  // namespace parity::test
