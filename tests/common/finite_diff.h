// Central-difference gradient checks in fp64 (ARCHITECTURE.md: every backward has one).
//
// Usage with the loss as a random linear functional of the op's outputs, loss = <r, out>,
// so that every output element contributes: run the backward with dout = r, then
//   EXPECT_TRUE(gradient_matches([&] { forward(...); return dot(r, out); }, x, dx));
// perturbs x in place (restoring it) and compares the numeric gradient with dx.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/tolerance.h"

namespace parity::test {

struct FdReport {
  double rel_err = 0.0;        // ||analytic - numeric|| / max(||analytic||, ||numeric||), 0 if both are 0
  double analytic_norm = 0.0;
  double numeric_norm = 0.0;
  int64_t worst = -1;          // index of the largest |analytic - numeric|
  double worst_analytic = 0.0, worst_numeric = 0.0;
};

// numeric[i] = (f(x + h e_i) - f(x - h e_i)) / (2h).
inline std::vector<double> numeric_gradient(const std::function<double(const std::vector<double>&)>& f,
                                            std::vector<double> x, double h = kFdStep) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double fp = f(x);
    x[i] = xi - h;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2.0 * h);
  }
  return g;
}

inline FdReport compare_gradients(const std::vector<double>& analytic, const std::vector<double>& numeric) {
  FdReport r;
  double diff = 0.0, na = 0.0, nn = 0.0, worst_abs = -1.0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    const double d = analytic[i] - numeric[i];
    diff += d * d;
    na += analytic[i] * analytic[i];
    nn += numeric[i] * numeric[i];
    if (!(std::fabs(d) <= worst_abs)) {
      worst_abs = std::fabs(d);
      r.worst = static_cast<int64_t>(i);
      r.worst_analytic = analytic[i];
      r.worst_numeric = numeric[i];
    }
  }
  r.analytic_norm = std::sqrt(na);
  r.numeric_norm = std::sqrt(nn);
  const double denom = std::fmax(r.analytic_norm, r.numeric_norm);
  r.rel_err = diff == 0.0 ? 0.0 : std::sqrt(diff) / denom;  // diff > 0 implies denom > 0
  return r;
}

// The helper itself: f is a scalar function of a vector, analytic its claimed gradient at x.
inline ::testing::AssertionResult check_gradient(const std::function<double(const std::vector<double>&)>& f,
                                                 const std::vector<double>& x, const std::vector<double>& analytic,
                                                 double tol = kFdRelTol, double h = kFdStep) {
  if (analytic.size() != x.size())
    return ::testing::AssertionFailure() << "gradient has " << analytic.size() << " elements, input " << x.size();
  const FdReport r = compare_gradients(analytic, numeric_gradient(f, x, h));
  if (r.rel_err <= tol) return ::testing::AssertionSuccess();  // NaN fails here
  return ::testing::AssertionFailure() << "central-difference relative error " << r.rel_err << " > " << tol
                                       << " (|analytic| " << r.analytic_norm << ", |numeric| " << r.numeric_norm
                                       << "); worst [" << r.worst << "]: analytic " << r.worst_analytic
                                       << ", numeric " << r.worst_numeric;
}

// In-place form: loss() reads the current contents of input; input is perturbed and
// restored to its original values before returning.
inline ::testing::AssertionResult gradient_matches(const std::function<double()>& loss, std::vector<double>& input,
                                                   const std::vector<double>& analytic, double tol = kFdRelTol,
                                                   double h = kFdStep) {
  const std::vector<double> saved = input;
  auto f = [&](const std::vector<double>& x) {
    input = x;
    return loss();
  };
  ::testing::AssertionResult res = check_gradient(f, saved, analytic, tol, h);
  input = saved;
  return res;
}

}  // namespace parity::test
