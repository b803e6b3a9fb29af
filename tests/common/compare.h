// Small vector helpers for the op tests: dot products, dtype casts and normwise errors.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace parity::test {

// sum_i a[i] * b[i] in index order, in fp64.
template <class A, class B>
double dot(const std::vector<A>& a, const std::vector<B>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

template <class To, class From>
std::vector<To> cast(const std::vector<From>& v) {
  std::vector<To> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<To>(v[i]);
  return out;
}

template <class T>
std::vector<T> zeros(int64_t n) {
  return std::vector<T>(static_cast<size_t>(n), T(0));
}

// Normwise relative error ||got - want|| / ||want|| (2-norms, fp64); 0 when both are 0,
// and the absolute error when only want is 0.
template <class A, class B>
double normwise_rel_err(const std::vector<A>& got, const std::vector<B>& want) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    diff += d * d;
    ref += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  if (diff == 0.0) return 0.0;
  return ref == 0.0 ? std::sqrt(diff) : std::sqrt(diff / ref);
}

// Passes when got and want have the same size and normwise_rel_err(got, want) <= tol.
template <class A, class B>
::testing::AssertionResult close_normwise(const std::vector<A>& got, const std::vector<B>& want, double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  const double err = normwise_rel_err(got, want);
  if (err <= tol && !std::isnan(err)) return ::testing::AssertionSuccess();
  size_t worst = 0;
  double worst_abs = -1.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (!(d <= worst_abs)) worst = i, worst_abs = d;
  }
  return ::testing::AssertionFailure() << "normwise relative error " << err << " > " << tol << "; worst element ["
                                       << worst << "]: got " << static_cast<double>(got[worst]) << ", want "
                                       << static_cast<double>(want[worst]);
}

// Passes when got and want are bitwise identical element by element.
template <class A, class B>
::testing::AssertionResult bitwise_equal(const A& got, const B& want) {
  using T = typename A::value_type;
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << "/" << got.size() << " elements differ bitwise; first ["
                                       << first << "]: got " << got[static_cast<size_t>(first)] << ", want "
                                       << want[static_cast<size_t>(first)];
}

}  // namespace parity::test
