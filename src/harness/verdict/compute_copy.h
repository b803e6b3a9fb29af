// The compute_copy row (issue 41, docs/verdict.md "Compute copies, bit for bit"): every compute copy a
// rank gathered in a step (parallel/pmodel.h compute_copy: its model-parallel-local tensor, rounded to
// its plan entry's 16-bit format, a linear's weight then quantized to fp8) against the one-device
// copy of the same elements, made from the baseline's masters before the step by the baseline's own
// rule (model/model.cpp). Under the step-local verdict the layout's masters are the baseline's at
// every step, so the two copies must be equal bit for bit: any difference is a precision fault of
// the plan or of the gather, named with the parameter, the element and the three values. Where this
// rank's masters are not the baseline's (a resumed phase's first step, the trajectory verdict after
// step 0) the premise fails and that parameter is not compared at that step: the param rows judge
// the masters. Only under a policy with a compute copy (a 16-bit storage format): under fp32 and
// fp64 the copy is the master itself.
//
// The records travel in verdict_wire.h's Section::copies, one CopyLocal per parameter per rank; no
// process here (tested on hand-made records).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/precision.h"
#include "core/tensor.h"
#include "harness/verdict/verdict_detail.h"

namespace parity::compute_copy {

// One parameter's compute copy on one rank at one step.
struct CopyLocal {
  double masters_equal = 1;  // 1: this rank's master shard before the step is the baseline's, bit for bit
  double gathered = 0;       // 1: this rank gathered a compute copy of it in the step
  double compared = 0, differing = 0;  // elements of that copy compared, and those whose bits differ
  double flat = -1;  // the first differing element's global flat index (-1: none; exact below 2^53)
  double got = 0, ref = 0, master = 0;  // there: the layout's copy, the one-device copy, the master
  static constexpr size_t kWidth = 8;
  void pack(std::vector<double>& out) const;
  static CopyLocal unpack(const double* in);
};

// n elements of a gathered copy (got) against the one-device copy (ref) and the master they were made
// from (master), all three in the copy's local order; global[i]: local element i's global flat index.
// Bit for bit: a -0 for a +0 differs, a NaN equals a NaN of the same bits.
template <class T>
CopyLocal compare(const T* got, const T* ref, const T* master, int64_t n, const std::vector<int64_t>& global) {
  CopyLocal c;
  c.gathered = 1, c.compared = static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(got + i, ref + i, sizeof(T)) == 0) continue;
    if (c.differing++ == 0)
      c.flat = static_cast<double>(global[static_cast<size_t>(i)]), c.got = static_cast<double>(got[i]),
      c.ref = static_cast<double>(ref[i]), c.master = static_cast<double>(master[i]);
  }
  return c;
}

// What the model's parameters are, for the row's words.
struct ParamInfo {
  std::string name;
  Shape shape;  // global
  bool fp8 = false;  // a linear's weight quantized to E4M3 under the policy (model/params.h fp8_weight_blocks)
};

// The reading of a differing element: what the layout's copy holds against what the policy requires,
// from the three values: "fp32 where fp16 is required (the master's value, not rounded)".
std::string reading(double got, double ref, double master, const ParamInfo& p, const Precision& policy, DType dtype);

// The row at one step from every rank's records: parts[r] points at rank r's Section::copies (one
// CopyLocal per parameter, registry order). Fails where any compared element differs; compared: the
// elements compared over every rank's copies; norm_rel: the fraction of them that differ; worst: the
// first differing element of the first differing parameter (registry order, lowest rank); detail: the
// parameters that differ and the reading of that element, and the parameters left uncompared.
verdict_detail::Outcome outcome(const std::vector<const double*>& parts, const std::vector<ParamInfo>& params,
                                const Precision& policy, DType dtype);

}  // namespace parity::compute_copy
