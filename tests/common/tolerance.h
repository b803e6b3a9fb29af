// The one tolerance table of the op tests. Every tolerance used in tests/ops is here,
// with its derivation; test bodies never write a number of their own.
#pragma once
#include "core/tensor.h"
#include "harness/verdict/tolerance.h"

namespace parity::test {

using parity::Quantity;
using parity::tolerance_for;

// Central differences in fp64 with step kFdStep: the truncation error is O(h^2 * f''')
// ~ 1e-12 and the rounding error O(eps64 * |f| / h) ~ 2e-16 * |f| / 1e-6 ~ 2e-10 * |f|;
// with |f| = O(10) and gradients of norm O(1) the normwise relative error is ~1e-9,
// so 1e-7 leaves two orders of margin while a wrong term (error O(1)) still fails.
inline constexpr double kFdStep = 1e-6;
inline constexpr double kFdRelTol = 1e-7;

// Normwise relative error of a result against an independent formula, keyed by the dtype
// of the result: the project's one table (harness/verdict/tolerance.h, Quantity::op_result, with
// its derivation there).
template <class T> struct Tolerance {
  static inline const double rel = tolerance_for(dtype_of<T>(), Quantity::op_result).norm_rel;
};

// Absolute tolerance for values that are exactly 0 or 1 in real arithmetic and are
// computed from O(1) data with O(100) fp64 operations (row sums of a softmax, the mean
// and variance of a normalised row): 100 * eps64 ~ 1e-14, so 1e-12.
inline constexpr double kExactAbsTol = 1e-12;

}  // namespace parity::test
