// `parity dump SCENARIO DIR`'s job: the one-device baseline's full trace as safetensors files
// plus a manifest.json describing every file's tensors (format parity-dump/1), so another
// framework can rebuild the model from the initial parameters and check each step.
#pragma once
#include <string>

#include "mesh/run_config.h"

namespace parity {

// Trains `s` on one device (the current one: core/device.h use_device) and writes DIR (new,
// empty, or a dump parity wrote: docs/faults.md "Nothing lost"). Returns 0. bounds: also
// train the rounding twin (harness/runner/twin.h) beside it and record its noise per step in
// the manifest, the bounds `parity compare` holds a candidate to (twice the time). trace_steps: also
// the traced tensors of steps 0 .. trace_steps - 1 (-1: every step) and their twin's noise (dump_trace.h).
int write_dump(const Scenario& s, const std::string& dir, bool bounds = true, int64_t trace_steps = 0);

}  // namespace parity
