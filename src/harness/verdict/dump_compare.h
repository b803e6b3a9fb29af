// `parity compare REF GOT`'s job: the verdict of `parity run` (harness/verdict: the same rows,
// bounds, near-tie arbitration and root naming) on two dumps from anywhere. REF is a
// `parity dump` (its manifest carries the rounding twin's noise per step, the bounds); GOT is
// any dump in the same format: parity_torch's Collector (docs/framework.md), another parity
// dump, a framework's own writer with `--map`. Every tensor is full (one element per global
// index): a dump of shards is assembled before it is written.
#pragma once
#include <cstdint>
#include <string>

#include "harness/verdict/verdict.h"

namespace parity {

struct DumpCompareOptions {
  std::string ref_dir, got_dir;
  // JSON object {"candidate name": "parity name"} or {"candidate name": {"name": "parity
  // name", "transpose": true}}: for a candidate whose parameter names (in init, grads.*,
  // params.*) differ from parity's, or whose 2-D weights are stored (out, in).
  std::string map_file;
  int64_t steps = -1;  // compare steps 0..steps-1 (default: every step of REF)
};

// Throws ConfigError (exit 2) naming what is wrong with the input: a directory that is not a
// dump, a candidate without a step or tensor the reference has (the step, the file and the
// tensor named), a shape that differs, models that differ. The report's exit_code() is the
// verdict's (0 pass, 1 fail).
VerdictReport compare_dumps(const DumpCompareOptions& o);

}  // namespace parity
