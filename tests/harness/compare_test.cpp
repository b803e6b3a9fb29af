#include <gtest/gtest.h>

#include <cmath>

#include "harness/verdict/compare.h"

namespace parity {
namespace {

Tensor<double> ramp(Shape s) {
  Tensor<double> t(std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data[static_cast<size_t>(i)] = 1.0 + 0.5 * static_cast<double>(i % 7);
  return t;
}

const Tolerance kTol{1e-12, 1e-9};

TEST(Compare, EqualTensorsPass) {
  Tensor<double> a = ramp({3, 4});
  CompareReport r = compare("w", a, a, kTol);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.bad, 0);
  EXPECT_EQ(r.norm_rel_err, 0.0);
  EXPECT_EQ(r.scale_ratio, 1.0);
}

TEST(Compare, ADoubledReductionShowsAsScaleRatioTwo) {
  Tensor<double> ref = ramp({2, 3, 5}), got = ref;
  for (auto& x : got.data) x *= 2;
  CompareReport r = compare("layers.1.moe.router.gate", got, ref, kTol);
  EXPECT_FALSE(r.ok);
  EXPECT_DOUBLE_EQ(r.scale_ratio, 2.0);
  EXPECT_DOUBLE_EQ(r.norm_rel_err, 1.0);
  EXPECT_EQ(r.bad, 30);
  ASSERT_EQ(r.first_bad.size(), 5u);
  EXPECT_EQ(r.first_bad[1].index, (Shape{0, 0, 1}));
}

TEST(Compare, WorstElementIsNamedByMultiIndex) {
  Tensor<double> ref = ramp({4, 5}), got = ref;
  got.data[13] += 1e-3;  // row 2, column 3
  got.data[2] += 1e-14;  // rounding-sized: not bad
  CompareReport r = compare("w", got, ref, kTol);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.worst.index, (Shape{2, 3}));
  EXPECT_EQ(r.bad, 1);
  EXPECT_NEAR(r.max_abs_err, 1e-3, 1e-15);
  EXPECT_EQ(index_str(r.worst.index), "[2, 3]");
}

TEST(Compare, RoundingSizedDifferencesPass) {
  Tensor<double> ref = ramp({100}), got = ref;
  for (size_t i = 0; i < got.data.size(); i += 3) got.data[i] = std::nextafter(got.data[i], 10.0);
  CompareReport r = compare("w", got, ref, kTol);
  EXPECT_TRUE(r.ok) << r.norm_rel_err;
  EXPECT_EQ(r.bad, 0);
}

TEST(Compare, NanAndShapeMismatchAlwaysFail) {
  Tensor<double> ref = ramp({3}), got = ref;
  got.data[1] = NAN;
  CompareReport r = compare("w", got, ref, Tolerance{1e9, 1e9});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.worst.index, (Shape{1}));
  EXPECT_EQ(r.bad, 1);
  EXPECT_FALSE(compare("w", ramp({3}), ramp({1, 3}), kTol).ok);
}

TEST(Compare, ZeroReferenceUsesAbsoluteError) {
  Tensor<double> ref({4}), got({4});
  EXPECT_TRUE(compare("z", got, ref, kTol).ok);
  got.data[0] = 1e-3;
  CompareReport r = compare("z", got, ref, kTol);
  EXPECT_FALSE(r.ok);
  EXPECT_DOUBLE_EQ(r.norm_rel_err, 1e-3);
}

TEST(Compare, FamilySumsCombineTensors) {
  Tensor<double> a = ramp({3}), b = ramp({5});
  Tensor<double> a2 = a, b2 = b;
  for (auto& x : b2.data) x *= 3;
  NormSums s = norm_sums(a2.ptr(), a.ptr(), 3);
  s.add(norm_sums(b2.ptr(), b.ptr(), 5));
  double ref2 = 0, dot = 0;
  for (double x : a.data) ref2 += x * x, dot += x * x;
  for (double x : b.data) ref2 += x * x, dot += 3 * x * x;
  EXPECT_DOUBLE_EQ(s.scale_ratio(), dot / ref2);
}

}  // namespace
}  // namespace parity
