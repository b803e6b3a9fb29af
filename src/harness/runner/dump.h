// `parity dump SCENARIO DIR`'s job: the one-device baseline's full trace as safetensors files
// plus a manifest.json describing every file's tensors (format parity-dump/1), so another
// framework can rebuild the model from the initial parameters and check each step.
#pragma once
#include <string>

#include "mesh/run_config.h"

namespace parity {

// Trains `s` on one device (the current one: core/device.h use_device) and writes DIR (new,
// empty, or a dump parity wrote: docs/faults.md "Nothing lost"). Returns 0.
int write_dump(const Scenario& s, const std::string& dir);

}  // namespace parity
