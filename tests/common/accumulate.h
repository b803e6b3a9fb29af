// Checks the backward convention of src/ops: every gradient output is accumulated into (+=).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "common/compare.h"
#include "common/random.h"
#include "common/tolerance.h"

namespace parity::test {

// backward(grads) writes the op's gradients into grads (one buffer per gradient output, with
// the given sizes). It is run on zeroed buffers (giving g) and on buffers pre-filled with
// random c; passes when the second run leaves c + g in every buffer and g is not all zero.
inline ::testing::AssertionResult backward_accumulates(
    const std::vector<int64_t>& sizes, const std::function<void(std::vector<std::vector<double>>&)>& backward,
    uint64_t seed = 99) {
  Rng rng(seed);
  std::vector<std::vector<double>> g, c;
  for (int64_t s : sizes) {
    g.push_back(zeros<double>(s));
    c.push_back(rng.vec(s));
  }
  backward(g);
  std::vector<std::vector<double>> got = c;
  backward(got);
  bool any_nonzero = false;
  for (size_t b = 0; b < g.size(); ++b) {
    std::vector<double> want(c[b].size());
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] = c[b][i] + g[b][i];
      any_nonzero = any_nonzero || g[b][i] != 0.0;
    }
    ::testing::AssertionResult r = close_normwise(got[b], want, Tolerance<double>::rel);
    if (!r) return ::testing::AssertionFailure() << "gradient output #" << b << ": " << r.message();
  }
  if (!any_nonzero) return ::testing::AssertionFailure() << "every gradient is zero: the check cannot fire";
  return ::testing::AssertionSuccess();
}

}  // namespace parity::test
