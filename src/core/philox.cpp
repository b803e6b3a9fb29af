#include "core/philox.h"

#include <Random123/philox.h>

#include <cmath>
#include <numbers>

namespace parity {

PhiloxWords philox(uint64_t key, uint64_t c0, uint64_t c1) {
  r123::Philox4x32 gen;
  r123::Philox4x32::ctr_type ctr = {{static_cast<uint32_t>(c0), static_cast<uint32_t>(c0 >> 32),
                                      static_cast<uint32_t>(c1), static_cast<uint32_t>(c1 >> 32)}};
  r123::Philox4x32::key_type k = {{static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)}};
  auto r = gen(ctr, k);
  return {r[0], r[1], r[2], r[3]};
}

uint64_t name_hash(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

double uniform_open(uint32_t hi, uint32_t lo) {
  // 52 bits: (2^52 - 1 + 0.5) * 2^-52 = 1 - 2^-53 is exact, so the result is never 1.
  uint64_t bits = (static_cast<uint64_t>(hi) << 20) | (lo >> 12);
  return (static_cast<double>(bits) + 0.5) * 0x1.0p-52;
}

double philox_normal(uint64_t seed, std::string_view name, uint64_t index) {
  return philox_normal_keyed(seed, name_hash(name), index);
}

double philox_normal_keyed(uint64_t seed, uint64_t name_key, uint64_t index) {
  PhiloxWords w = philox(seed, index, name_key);
  double u1 = uniform_open(w[0], w[1]);
  double u2 = uniform_open(w[2], w[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace parity
