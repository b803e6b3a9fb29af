// The verdict of a parity run (docs/design/foldings.md, "What a parity run compares").
//
// Inside every rank: a BaselineRun<T> (each rank its own one-device copy, same seeds and
// data) and the layout's ParallelRun<T> step side by side. Per step:
//   - loss, every micro-batch loss, grad_norm, clip_coef (global values, checked on every rank);
//   - per parameter family, the gradients (reduced, before clipping) and the parameters after
//     the step: each rank slices the baseline's full tensor with mesh::global_indices() and
//     sums the normwise error over its local elements; an element is counted once, by the
//     first replica (counted_copy()), and every copy is checked for the worst element;
//   - routing: each reported token's chosen experts against the baseline's, every token
//     reported exactly once; a differing decision carries the baseline's score gap between
//     the two experts, and a gap inside the rounding bound is named "near-tie";
//   - tokens_per_expert exactly, expert_bias after its update.
// The sums are reduced over the world, so every rank holds the same report and the same
// exit code; rank 0 prints it. This folder is the records and their arithmetic (rows, bounds,
// roots, the report): no process, communicator or environment variable, so it is tested on
// hand-made records. The step loop that runs the two models and reduces the sums over the
// world is harness/runner/verdict_run.h. Library code: throws typed errors, never exits.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mesh/mesh.h"
#include "mesh/placement.h"
#include "mesh/run_config.h"
#include "model/params.h"
#include "harness/verdict/verdict_root.h"

namespace parity {

// A deliberate error in what the layout reports, applied by the harness just before the
// compare, so a test can show that the verdict fails (ARCHITECTURE.md: no check that cannot
// fire). Spec "scale_grad:FAMILY:FACTOR" or "scale_param:FAMILY:FACTOR", e.g.
// PARITY_FAULT=scale_grad:router:2 multiplies every local router-gate gradient by 2. A
// suffix @R applies it on world rank R alone: scale_param:router:1.0000000001@1 moves one
// replica's bits and nothing else (the replicas row, docs/verdict.md).
// scale_loss:all:F and scale_grad_norm:all:F scale the reported loss (every micro-batch's too)
// or the grad norm (tests/verdict/calibration.py plants faults just above and below bounds).
// scale_rounded_grad:FAMILY:F scales the reduced gradients alone, not the reductions' exact result
// beside them (bf16-reduce-bf16's step-local grad rows, docs/verdict.md): a change the policy's
// roundings cannot make must fail, one within them passes. Elsewhere it is scale_grad.
struct Fault {
  enum class Target { grad, param, loss, grad_norm, rounded_grad };
  Target target = Target::grad;
  Family family = Family::router;
  double factor = 1;
  int rank = -1;  // -1: every rank
};
// Throws ConfigError("PARITY_FAULT", rule) on a malformed spec.
Fault parse_fault(std::string_view spec);

// Whether `rank` holds the counted copy of its elements under layout `l`: coordinate 0 on
// every Replicate dimension of the layout's view (and on every Partial one, where
// coordinate 0 holds the value itself). Each element of the global tensor has exactly one
// such holder.
bool counted_copy(const mesh::Mesh& m, const mesh::TensorLayout& l, int rank);
// How many ranks hold each element of a tensor under l: the product of its Replicate (and Partial)
// dimensions' sizes, times the pipeline stages that hold it.
double copies_of(const mesh::Mesh& m, const mesh::TensorLayout& l);

enum class RowVerdict { fail, near_tie, ok };  // the order rows are printed in
std::string_view row_verdict_name(RowVerdict v);  // "FAIL", "near-tie", "ok"

// The element with the largest |got - ref| of a row, over every rank's copy.
struct WorstElement {
  std::string name;  // parameter name, "loss", "micro 1", "layer 1 token 37", ...
  Shape index;       // global multi-index (empty for scalars)
  int rank = -1;
  double got = 0, ref = 0, abs_err = 0;
};

// One row of the table: a quantity (loss, grad, param, ...) of one subject (a family, an
// MoE layer) over all steps. The numbers shown are those of the first failing step when the
// row fails (the cleanest view of a bug: later steps start from diverged parameters), else
// those of the step with the largest error.
struct Row {
  std::string quantity;  // loss, grad_norm, clip_coef, grad, param, routing, tokens_per_expert, expert_bias
  std::string subject;   // family name, "layer 1", or "" for scalars
  double norm_rel = 0;   // normwise relative error at `step`
  double scale_ratio = 1;  // <x, ref> / ||ref||^2 at `step` (NaN when undefined)
  double tol = 0;        // the bound on norm_rel at `step` (tolerance.h measured_bound)
  std::string bound_from;  // "twin" (kTwinFactor x the rounding twin's noise), "floor", or "model" (a grad floor raised
                           // for few tokens or a gradient far below the model's: tolerance.h gradient_row_bound)
  double floor = 0;        // the row's floor at `step` (tol >= floor; ci/calibrate reads error / floor)
  double twin = 0;         // kTwinFactor x the twin's noise at `step` (NaN: not measured): tol = max(twin, floor)
  double far = 0, far_bound = 0;  // tensor rows: the fraction of far elements at `step`, its bound
  double taken = 0, taken_bound = 0;  // param rows: the gradient the optimizer took at `step`, its bound
  double explained = 0;  // param rows: the update the taken gradient explains, in tol (tolerance.h with_explained)
  double reduction = 0;  // grad rows: what 16-bit reductions may move, in tol (tolerance.h with_reduction)
  double loosest = 0;    // the largest bound over the steps (tolerance.h kLooseBound: the report names it)
  int64_t loosest_step = -1;
  int64_t step = -1;     // the step shown
  int64_t bad_steps = 0;  // steps over the bound
  int64_t compared = -1;  // elements compared at `step` (tokens for routing, copies for replicas); -1: a scalar
  int64_t flow = -1;        // grad rows failing: the backward position of the first wrong tensor (verdict_flow.h)
  std::string flow_tensor;  // its name
  WorstElement worst;
  std::string detail;    // routing and count rows: what differed
  RowVerdict verdict = RowVerdict::ok;
};

// Per step, the scalars of the step table.
struct StepLine {
  int64_t step = 0;
  double loss = 0, loss_ref = 0;
  double loss_diff = 0;       // loss - loss_ref (worst rank)
  double micro_rel = 0;       // largest |micro - ref| / |ref| over micro-batches and ranks
  double grad_norm_rel = 0;   // |grad_norm - ref| / ref
  double clip_coef = 1, clip_ref = 1;
  int64_t route_diff = 0;     // tokens whose chosen experts differ (all MoE layers)
  int64_t near_ties = 0;      // near-ties that followed the baseline's choice (all MoE layers)
};

// Seconds. start-up: from the launcher's start to the rank's verdict entry (process spawn,
// exec, argument parsing; 0 when unknown); rendezvous: joining the world; setup: building the
// baseline and the layout's model; baseline, parallel: their steps; layout_comm: the part of
// `parallel` spent inside collectives (waiting for the slowest peer included), over
// layout_comm_calls collectives; compare: slicing and sums; compare_comm: the verdict's own
// reductions. Per rank; the report keeps rank 0's and, per field, the slowest rank's.
struct Timings {
  double startup = 0, rendezvous = 0, setup = 0, baseline = 0, parallel = 0;
  double layout_comm = 0, layout_comm_calls = 0;
  double compare = 0, compare_comm = 0;
};

struct VerdictReport {
  std::string scenario, dtype, precision, backend, layout;  // layout: "world 8 = dpr 1 x dps 4 x tp 2, sp"
  std::string optim;  // "adam lr 0.003": the optimizer the ranks really ran (after --optim / --lr)
  std::string mode;   // "step-local" or "trajectory" (Scenario::trajectory); "" for parity compare
  int world = 1;
  int64_t steps = 0;
  int64_t first_step = 0;  // the first step compared (> 0 when the layout resumed)
  std::string fault;  // the injected fault, "" when none
  std::string checkpoint;  // what the run did with checkpoints ("" when nothing)
  // A failure at rounding level measured again with twice the twins (docs/verdict.md "Measured again"):
  // "the first measurement (N twins) failed at rounding level, root: ...", or "not measured again ...: it would
  // need ..." where it would not fit in memory; "" when the verdict was measured once
  std::string remeasured;
  // Floors first (docs/verdict.md): "" when the rounding twin measured the bounds, else what the report says of
  // its absence (every row within its floor: the twin could only have widened a bound)
  std::string twin;
  std::vector<StepLine> step_lines;
  std::vector<Row> rows;  // failing rows first, then near-ties, then the rest
  LayoutDegrees degrees;  // for naming a wrong factor (verdict_root.h)
  // The traced step (harness/runner/trace_run.h): the first diverging tensor ("" none) and the trace's table
  std::string trace_root;
  std::vector<std::string> trace_lines;
  std::vector<std::string> trace_placements;  // each rank's records and where they land (parity explain --trace)
  // Per parameter, the traced op whose backward produced its gradient's partial sums and the plan's
  // reductions of them (trace_verdict.h reduced_after): what a root that enters after the backward names
  std::vector<std::pair<std::string, std::string>> trace_reduced;
  Timings rank0, slowest;
  std::string command = "run";  // the report's first word: "run", or "compare" (two dumps, no ranks, no timings)
  bool passed() const;    // no row FAIL (near-ties are shown, not failures)
  // Whether any step was compared: not when a run resumes at its last step (`--resume DIR
  // --steps K --save-at K` re-saves a checkpoint under another layout; `parity run` refuses
  // it without --save-at). Such a verdict reads "nothing compared", never PASS.
  bool compared() const { return steps > first_step; }
  int exit_code() const { return passed() ? 0 : 1; }
};

// The table rank 0 prints (verdict_report.cpp), and the same as JSON for --report.
std::string format_verdict(const VerdictReport& r);
nlohmann::json verdict_json(const VerdictReport& r);
// Every --report file is verdict_json dumped with sorted keys: this key comes within its first
// lines, which is how parity knows a report it may overwrite (core/files.h check_output_file).
inline constexpr const char* kVerdictReportSignature = "\"compared_steps\":";

}  // namespace parity
