// The memory a run needs, estimated from the scenario alone before anything is allocated
// (docs/scenario.md, "Limits"), and the two refusals built on it:
//   absurd      one process would need more than kAbsurdBytes (1 PiB): no machine holds that,
//               so the sizes are bad input (ConfigError, exit 2), checked with the schema;
//   not here    the run needs more than this machine has (UnavailableError, exit 77), checked
//               by `parity run` on the launcher side before any rank starts.
// The estimate is a floor, not a forecast: parameters, gradients and optimizer moments of the
// whole model, and one micro-batch's largest activations (attention probabilities, MLP and
// expert hidden states, logits). A run it refuses cannot fit; a run it passes may still need
// more. Computed in doubles, so absurd sizes cannot overflow it.
//
// Where the baseline lives decides the count (harness/runner/shared_baseline.h):
//   once_per_host   the launcher trains the one-device baseline once (one training state and
//                   its activations) and publishes the initial parameters in a shared file;
//                   the ranks hold only the layout: every element of the training state lives
//                   on at least one rank of each HSDP replica (dp_replicate copies in all),
//                   and one micro-batch's activations are spread over them;
//   in_every_rank   (PARITY_SHARED_BASELINE=0) every rank trains its own copy beside its shard.
#pragma once
#include <cstdint>
#include <string>

#include "mesh/run_config.h"

namespace parity {

inline constexpr double kAbsurdBytes = 1125899906842624.0;  // 2^50 bytes, 1 PiB

enum class BaselinePlace { once_per_host, in_every_rank };

struct MemoryEstimate {
  double parameters = 0;     // elements of the model's parameters
  double process_bytes = 0;  // one process: a whole one-device training state and its activations
  double state_bytes = 0;    // of which the training state (parameters, gradients, moments)
  int64_t processes = 1;     // processes of the run on this machine (the layout's world)
  BaselinePlace baseline = BaselinePlace::in_every_rank;
  double run_bytes = 0;      // the whole run's floor (see above)
  std::string largest;       // the largest single tensor, "attention weights (dim x dim): 1.2e24 elements"
  double largest_elements = 0;
};

// The run of `model` under `optim` and `layout`: one process for world 1, else one per rank
// with the baseline where `baseline` says.
MemoryEstimate estimate_memory(const ModelConfig& model, const OptimConfig& optim, const LayoutConfig& layout,
                               BaselinePlace baseline = BaselinePlace::in_every_rank);

// ConfigError("$.model", ...) naming the largest tensor when one process would need more
// than kAbsurdBytes. Needs sizes that already passed the schema's ranges (all >= 1).
void check_plausible_size(const ModelConfig& model, const OptimConfig& optim);

// UnavailableError (exit 77) "<what>: needs at least X GiB of memory (...), this machine has
// Y GiB" when the run does not fit: host memory for device cpu, the visible GPUs' memory for
// cuda. Prefix `what` is the scenario file. The baseline's place is the one `parity run` will
// use (baseline_place(): PARITY_SHARED_BASELINE).
void require_memory(const Scenario& s, const LayoutConfig& layout, const std::string& what);

// A verdict measured again (docs/verdict.md "Measured again") trains, in every rank, its own baseline and `twins`
// rounding twins beside its share of the layout: "" when that fits this machine (or its memory is unknown), else
// "it would need at least X of memory (...), this machine has Y".
std::string measured_again_memory(const Scenario& s, int64_t twins);

// ConfigError (exit 2) "<what>: $.layout.world: ..." when the layout puts more ranks on one host
// (world / nnodes, rounded up) than the per-host cap (proc/launch.h kMaxRanksPerHost); the same
// for a resume check's $.resume.layout.world. Checked before anything starts (once: exit 1,
// "shared baseline: 512 ranks on one host", no JSON path).
void require_ranks_per_host(const Scenario& s, int nnodes, const std::string& what);

// "1.5 GiB", "12 TiB": bytes for messages.
std::string bytes_str(double bytes);

}  // namespace parity
