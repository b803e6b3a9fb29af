// Scalar helpers shared by the CPU reference ops (not part of the op interface).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace parity::ops_detail {

// Logistic sigmoid, stable for large |x|: exp is only ever taken of a non-positive number,
// so it never overflows; sigmoid(-1000) = 0 and sigmoid(1000) = 1 without inf/inf.
template <class T>
inline T stable_sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// Throws parity::Error unless 0 <= idx < bound; `what` names the op and the argument.
inline void check_index(int64_t idx, int64_t bound, const char* what) {
  if (idx < 0 || idx >= bound)
    throw Error(std::string(what) + ": index " + std::to_string(idx) + " out of range [0, " +
                std::to_string(bound) + ")");
}

}  // namespace parity::ops_detail
