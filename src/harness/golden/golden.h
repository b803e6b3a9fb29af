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

// One run's curves, index = step - start_step (steps start at 0; a resumed phase's at the step
// it resumed from).
struct Curves {
  int64_t start_step = 0;
  std::vector<double> loss, grad_norm, aux_loss;                  // (steps)
  std::vector<int64_t> moe_layers;                                // layer index of each MoE layer
  std::vector<std::vector<std::vector<int64_t>>> tokens_per_expert;  // per MoE layer: (steps, E)
  size_t steps() const { return loss.size(); }
};

// What a golden run cost on the machine that made it (issue 43): time to verdict, CPU time and
// each process's peak memory, pinned beside the curves and checked with a band (PerfBand) on
// the same machine only. $.perf in the file; absent in a golden made before it ("not pinned").
struct Perf {
  std::string machine;              // machine_name(): the CPU model and count
  double wall_s = 0;                // time to verdict: the baseline's and the layout's curves, start to end
  double cpu_s = 0;        // CPU seconds of the command's run: the baseline, in its own process
  // CPU seconds of the ranks' computing, summed: each rank's outside collectives and start-up (a
  // rank waiting for a peer spins, so that time grows with the machine's load); 0 for world 1
  double ranks_cpu_s = 0;
  std::vector<double> peak_rss_mib; // peak resident memory: [0] the command (the baseline), then rank 0, 1, ...
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
  // The verdict's measured bound on the loss, relative to the baseline's, per step: the
  // rounding twin's noise (the envelope of the free-running twin, tolerance.h measured_bound),
  // made by `update` for the plot's bound line; `check` neither reruns nor compares it. Empty in
  // a golden made before it (the plot then draws the bound's floor and says so). $.loss_bound
  std::vector<double> loss_bound;
  std::optional<Perf> perf;  // $.perf
  // A save-and-resume scenario's second phase (world > 1, Scenario::resume): the layout saves
  // after resume_step steps (its curves above run on to the end), resume_layout loads that
  // checkpoint and trains the rest: resumed, steps resume_step.. . $.resume {layout_shape,
  // save_at, curves}; absent in a golden made before it.
  int64_t resume_step = -1;
  std::string resume_layout;
  std::optional<Curves> resumed;
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
// any_start: the curves may start at any step (a resumed phase's); otherwise at 0.
Curves curves_from_json(const nlohmann::json& j, const std::string& where, bool any_start = false);

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

// The perf band (docs/golden.md "Time and memory"): a run fails when the command's CPU time
// exceeds cpu_factor x the pinned one + cpu_slack_s, the ranks' exceeds ranks_factor x theirs +
// ranks_slack_s, or a process's peak memory exceeds rss_factor x its pinned one +
// rss_slack_mib. Chosen from the spread measured on the loaded 2-core machine (the baseline's
// CPU up to 1.08x; the ranks' up to 2.24x and +0.5 s: eight ranks on two busy cores; peak
// memory up to 1.043x, +0.6 MiB), with room above it.
struct PerfBand {
  double cpu_factor = 1.5, cpu_slack_s = 0.3;
  double ranks_factor = 3, ranks_slack_s = 0.6;
  double rss_factor = 1.25, rss_slack_mib = 4;
  // The sums over every scenario `golden check` compared on this machine (docs/golden.md "Time
  // and memory"): a scenario's tens of milliseconds sit inside a loaded machine's noise, their
  // sum does not, so a 2x slowdown of the code that no single band can see fails the total.
  double suite_factor = 1.6, suite_slack_s = 2;
};
struct PerfCheck {
  enum class State { pass, fail, not_pinned, other_machine, off } state = State::off;
  std::string summary;             // one phrase for the check's line: "perf PASS (cpu 2.1 s, pinned 2.0 s; ...)"
  std::vector<std::string> fails;  // one line per quantity over its band
};
// want: the golden's perf (nullopt: not pinned); enabled: false with --no-perf. A golden made on
// another machine (Perf::machine differs) is not compared: other_machine, said in the summary.
PerfCheck compare_perf(const std::optional<Perf>& want, const Perf& got, bool enabled,
                       const PerfBand& band = PerfBand{});

// What a child `golden check` hands its parent for the suite's total (--perf-out FILE): its perf
// state and its measured and pinned CPU seconds, when compared (pass or fail) on this machine.
struct PerfShare {
  bool compared = false;
  double cpu_s = 0, ranks_cpu_s = 0, pinned_cpu_s = 0, pinned_ranks_cpu_s = 0;
};
PerfShare perf_share(const std::optional<Perf>& want, const Perf& got, const PerfCheck& c);
std::string perf_share_json(const PerfShare& s);
PerfShare parse_perf_share(const std::string& text, const std::string& where);  // throws ConfigError
// The suite's total over the shares compared: one line for `golden check`'s end and whether it fails.
struct SuitePerf {
  bool compared = false, failed = false;
  std::string line;
};
SuitePerf suite_perf(const std::vector<PerfShare>& shares, size_t scenarios, const PerfBand& band = PerfBand{});

// This process: CPU seconds (user + system) so far and the peak resident memory in MiB (VmHWM).
struct ProcessUsage {
  double cpu_s = 0, peak_rss_mib = 0;
};
ProcessUsage process_usage();
// Resets this process's peak resident memory to its current size (/proc/self/clear_refs), so
// that one process measuring several runs in turn gives each its own peak. False where the
// kernel refuses (the peak then includes the runs before).
bool reset_peak_rss();
// "Intel(R) Xeon(R) ... x 2 CPUs": the CPU model (/proc/cpuinfo) and the CPUs online.
std::string machine_name();

// The one-device baseline's curves for the scenario's steps (harness/runner/baseline.h);
// with `bound`, its rounding twin runs beside it and `bound` gets the loss's measured bound
// per step (Golden::loss_bound).
Curves baseline_curves(const Scenario& s, std::vector<double>* bound = nullptr);
// Collective over `world`: the layout's curves (parallel/parallel_run.h), identical on
// every rank (the step's global values). save_at >= 0: the training state is saved into
// ckpt_dir after save_at steps (the run goes on); resume_dir: the run starts from the
// checkpoint there (saved under any layout) and its curves from the step it was saved after.
struct CurvesCheckpoint {
  int64_t save_at = -1;
  std::string ckpt_dir, resume_dir;
  const ValidLayout* valid = nullptr;  // the run request's proof that the layout met the rules (ParallelRun)
};
Curves layout_curves(const Scenario& s, comm::Communicator& world, const CurvesCheckpoint& ck = {});

// The commit of the source tree at `dir` (git rev-parse HEAD), or "unknown".
std::string current_commit(const std::string& dir);

}  // namespace parity
