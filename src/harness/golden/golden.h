// Golden curves (issue 9): per scenario, the per-step loss, grad_norm, aux loss and per-MoE-
// layer tokens_per_expert of the baseline and of the layout, pinned in golden/<scenario>.json
// so that a later change that moves any of them is seen, even when baseline and layout move
// together (which the verdict cannot see).
//
// File shape (Megatron-LM's golden values, one object per metric):
//   {"baseline": {"aux_loss": {"start_step": 0, "end_step": 49, "step_interval": 1,
//                              "values": {"0": 0.0, "1": ...}},
//                 "grad_norm": {...}, "loss": {...}, "tokens_per_expert.layer1": {...}},
//    "commit": "...", "dtype": "fp64", "entropy_floor": 2.1, "layout": {...} | null,
//    "scenario": "fsdp2", "scenario_hash": "fnv1a64:...", "steps": 50, "world": 2, ...}
// Object keys sorted, step keys in step order, one value per line, fp64 as %.17g (round
// trips exactly), tokens_per_expert values as integer arrays. Library code: throws
// ConfigError (bad file), IoError (unreadable or unwritable), never exits.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/communicator.h"
#include "mesh/run_config.h"

namespace parity {

inline constexpr int64_t kGoldenSteps = 50;  // long enough for the loss to fall toward the floor

// One run's curves, index = step - start_step (steps start at 0).
struct Curves {
  std::vector<double> loss, grad_norm, aux_loss;                  // (steps)
  std::vector<int64_t> moe_layers;                                // layer index of each MoE layer
  std::vector<std::vector<std::vector<int64_t>>> tokens_per_expert;  // per MoE layer: (steps, E)
  size_t steps() const { return loss.size(); }
};

struct Golden {
  std::string scenario;       // Scenario::name
  std::string scenario_hash;  // scenario_hash() of the file's scenario (before overrides)
  std::string dtype;          // the precision policy: fp64 | fp32 | bf16 | bf16-reduce-bf16
  std::string commit;         // git rev-parse HEAD when made, or "unknown"
  std::string backend;        // the backend that made the layout's curves ("" for world 1)
  std::string layout;         // "world 4 = dp_replicate 1 x dp_shard 2 x tp 2, ep 1, etp 2"
  int64_t world = 1;
  double entropy_floor = 0;
  Curves baseline;
  std::optional<Curves> layout_curves;  // world > 1 only
};

// "fnv1a64:<16 hex digits>" of scenario_to_json(s).dump() (sorted keys, no whitespace), with
// Scenario::source left out: the same file content gives the same hash wherever it lives.
std::string scenario_hash(const Scenario& s);

// golden/<name>.json text: stable (see the file comment) and exact.
std::string golden_to_text(const Golden& g);
// What every golden file holds ($.format): the mark that lets `golden update` replace a file
// (core/files.h check_output_file; anything else at that path is refused, never overwritten).
inline constexpr const char* kGoldenSignature = "\"format\": \"parity-golden-1\"";
// Parses a golden's JSON; `where` (the file) prefixes errors. Throws ConfigError.
Golden golden_from_json(const nlohmann::json& j, const std::string& where);
inline constexpr int64_t kMaxGoldenBytes = int64_t{64} << 20;  // a 50-step golden is about 20 KB
Golden load_golden(const std::string& path);             // IoError when missing
void save_golden(const std::string& path, const Golden& g);  // write + rename (atomic)

// Curves alone (the rank-to-launcher hand-off file uses the same metric objects).
nlohmann::json curves_to_json(const Curves& c);
Curves curves_from_json(const nlohmann::json& j, const std::string& where);

// One value of a check that is outside its bound.
struct CurveDiff {
  std::string run;     // "baseline" | "layout"
  std::string metric;  // loss, grad_norm, aux_loss, tokens_per_expert.layerL
  int64_t step = 0;
  std::string got, want;  // formatted
  double rel = 0, tol = 0;  // relative difference and its bound (counts: exact, tol 0)
};
struct GoldenCheck {
  std::vector<CurveDiff> diffs;  // every differing step, in run / metric / step order
  std::vector<std::string> structural;  // steps, layers or runs that do not match at all
  int64_t compared = 0;  // values compared (a count vector is one value)
  double max_rel = 0;    // largest relative difference of a scalar
  bool passed() const { return diffs.empty() && structural.empty(); }
};
// Compares freshly computed curves with a golden. Scalars: |got - want| <= tol * |want| with
// tol = tolerance_for(dtype, Quantity::golden_curve).norm_rel; tokens_per_expert exactly.
GoldenCheck compare_golden(const Golden& want, const Golden& got);

// The one-device baseline's curves for the scenario's steps (harness/runner/baseline.h).
Curves baseline_curves(const Scenario& s);
// Collective over `world`: the layout's curves (parallel/parallel_run.h), identical on
// every rank (the step's global values).
Curves layout_curves(const Scenario& s, comm::Communicator& world);

// The commit of the source tree at `dir` (git rev-parse HEAD), or "unknown".
std::string current_commit(const std::string& dir);

}  // namespace parity
