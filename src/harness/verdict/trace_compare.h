// `parity compare`'s trace (issue 45 item 4, docs/verdict.md "The trace"): when the reference (`parity
// dump --trace`) and the candidate (parity_torch's trace map, docs/framework.md "Traces") both hold the
// traced tensors of a step, the step `parity run` would trace (the first failing row's, else step 0) is
// compared key by key in data-flow order by trace_verdict::first_diverging, the judgment `parity run
// --trace` uses: each key's bound from the reference's twin (`trace_noise`, tolerance.h trace_bound),
// every element counted for the data-parallel rank that computed its sequence (the candidate's
// `sequences`), or under tp for the rank that computed its row (`trace_owner.fwd.NAME` (B, S) and the
// manifest's `trace_ranks`), the first key over its bound named with its micro-batch, rank and element.
#pragma once
#include <cstdint>
#include <vector>

#include "harness/verdict/dump_read.h"
#include "harness/verdict/verdict.h"

namespace parity {

// Whether `d` lists trace files ($.trace_files).
bool holds_traces(const Dump& d);

// Sets rep.trace_root / trace_lines when both dumps hold traces of the step to trace. param_bound: per
// step, the largest param row bound (the candidate's parameters drift by up to it before the next step;
// step 0 starts from the reference's own). A traced tensor of another shape than the reference's is bad
// input (ConfigError); one the reference does not hold is not read; a key the reference holds and the
// candidate did not trace is listed, never passed.
void compare_traces(VerdictReport& rep, const Dump& ref, const Dump& got, const std::vector<double>& param_bound);

}  // namespace parity
