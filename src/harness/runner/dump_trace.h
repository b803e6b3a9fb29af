// `parity dump --trace` (issue 45 item 4, docs/framework.md "Traces"): the baseline's traced tensors
// of every step (model/trace.h, the list `parity run --trace` compares) as one safetensors file per
// step, trace_NNNNNN.safetensors, each key's full tensor (B, S, columns) under its
// trace_verdict::tensor_name, every micro-batch's sequences at their rows; with the bounds, the
// rounding twin's noise per key in the step's manifest entry (`trace_noise`), the measurement
// `parity run --trace` bounds its trace with (harness/runner/trace_run.h baseline_trace, twin on).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "harness/runner/baseline.h"
#include "mesh/run_config.h"

namespace parity {

struct TraceDumped {
  nlohmann::ordered_json file;   // the manifest's trace_files entry: {file, step, tensors}
  nlohmann::ordered_json noise;  // {tensor name: the twin's normwise distance}; null without bounds
};

// Step r of the baseline traced again from `before` (its parameters before the step) and `bias` (its
// expert biases before it), routed as r records, written to DIR/trace_NNNNNN.safetensors.
template <class T>
TraceDumped write_trace_step(const std::string& dir, const Scenario& s, const StepRecord<T>& r,
                             const std::vector<Tensor<T>>& before, const std::vector<Buffer<T>>& bias, bool bounds);

}  // namespace parity
