// The one tolerance table of the op tests. Every tolerance used in tests/ops is here,
// with its derivation; test bodies never write a number of their own.
#pragma once

namespace parity::test {

// Central differences in fp64 with step kFdStep: the truncation error is O(h^2 * f''')
// ~ 1e-12 and the rounding error O(eps64 * |f| / h) ~ 2e-16 * |f| / 1e-6 ~ 2e-10 * |f|;
// with |f| = O(10) and gradients of norm O(1) the normwise relative error is ~1e-9,
// so 1e-7 leaves two orders of margin while a wrong term (error O(1)) still fails.
inline constexpr double kFdStep = 1e-6;
inline constexpr double kFdRelTol = 1e-7;

// Normwise relative error of a result against an independent formula, keyed by the dtype
// of the result. fp64: both sides round differently, each elementary result carries
// O(len * eps64) ~ 100 * 1.1e-16 = 1e-14 relative error; 1e-12 keeps a margin for the
// O(10) condition numbers of the test inputs. fp32 against the fp64 op on the same
// (fp32-representable) inputs: O(len * eps32) = 100 * 6e-8 = 6e-6, so 2e-5.
template <class T> struct Tolerance;
template <> struct Tolerance<double> {
  static constexpr double rel = 1e-12;
};
template <> struct Tolerance<float> {
  static constexpr double rel = 2e-5;
};

// Absolute tolerance for values that are exactly 0 or 1 in real arithmetic and are
// computed from O(1) data with O(100) fp64 operations (row sums of a softmax, the mean
// and variance of a normalised row): 100 * eps64 ~ 1e-14, so 1e-12.
inline constexpr double kExactAbsTol = 1e-12;

}  // namespace parity::test
