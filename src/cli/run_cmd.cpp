// `parity run SCENARIO`: the option table. What it does is harness/runner/run_flow.h (world
// 1: the baseline alone, each step's loss beside the entropy floor; world > 1: the layout's
// ranks against the one-device baseline, rank 0 prints the verdict; a "resume" object: the
// save-and-resume-elsewhere check), through the one run protocol (run_request.h,
// launch_run.h). --as-rank: this process is one rank started by another launcher (mpirun,
// srun, torchrun-like; docs/multihost.md), and runs the request's rank side (rank_main.h).
// Exit codes: core/exit_codes.h.
#include <cstdlib>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/self.h"
#include "core/inject.h"
#include "core/knobs.h"
#include "core/text.h"
#include "harness/runner/rank_main.h"
#include "harness/runner/run_flow.h"

namespace parity::cli {

namespace {

struct RunOptions {
  std::string scenario;
  Overrides over;
  int64_t every = 1;
  std::string report, log_dir, inject;
  double timeout_s = 60;
  double deadline_s = 0;  // --deadline: wall clock of each launch (0: none)
  bool as_rank = false;
  int64_t save_at = -1;      // --save-at K (with --ckpt DIR)
  std::string ckpt, resume;  // --ckpt DIR, --resume DIR
  bool trace = false;        // --trace
  int nnodes = 1, node_rank = 0;  // --nnodes, --node-rank, --master: this host's share of the ranks
  std::string master;
};

RunRequest request_of(const RunOptions& o, bool timeout_given) {
  RunRequest r;
  // a rank (--as-rank) keeps the check's proof: ParallelRun takes it instead of checking again
  r.scenario = resolve_scenario(o.scenario, o.over, o.as_rank ? &r.valid : nullptr);
  if (o.as_rank) r.scenario->resume.reset();  // a rank runs one phase; the launcher checked the whole file
  r.report = o.report, r.save_at = o.save_at, r.ckpt = o.ckpt, r.resume = o.resume, r.trace = o.trace;
  r.timeout_s = o.timeout_s, r.deadline_s = o.deadline_s, r.log_dir = o.log_dir;
  if (o.as_rank && timeout_given) r.rank_timeout_s = o.timeout_s;  // over PARITY_COMM_TIMEOUT_MS
  r.nnodes = o.nnodes, r.node_rank = o.node_rank, r.master = o.master;
  if (o.as_rank) {  // no launcher of ours fills them (launch() does for its ranks): the environment's
    r.inject = injected_names();
    if (fault_from_env()) r.fault = knob("PARITY_FAULT");
  }
  check_request(r, printable(o.scenario, 4096));
  return r;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "Train a scenario. World 1: print each step's loss beside the entropy floor. World > 1: start the\n"
      "layout's ranks, compare every step with the one-device baseline (loss, gradients and parameters\n"
      "per family, grad norm, clipping, routing, tokens_per_expert, expert bias) and print the verdict.\n"
      "Exit 0 within tolerance, 1 not, 2 bad input.");
  sub->add_option("scenario", o->scenario, "Scenario JSON file (docs/scenario.md)")->required();
  sub->add_option("--steps", o->over.steps, "Override the scenario's number of steps")->check(steps_choice());
  sub->add_option("--every", o->every, "World 1: print every K-th step (the last is always printed)")
      ->check(positive_integer());
  sub->add_option("--precision,--dtype", o->over.precision,
                  "Override the scenario's precision policy: fp64, fp32, bf16 (bf16 storage, fp32 compute and "
                  "reductions), bf16-reduce-bf16, fp16, fp8 or fp8-delayed (docs/precision.md); --dtype is its "
                  "older name")
      ->check(precision_choice());
  sub->add_option("--backend", o->over.backend,
                  "Override the layout's backend: gloo, mpi, nccl or sim (every rank a thread of this process)")
      ->check(backend_choice());
  sub->add_option("--device", o->over.device,
                  "Override the layout's device: cpu or cuda (the baseline and every rank on the GPU; ranks share\n"
                  "the visible GPUs round-robin by local rank). Exit 77 when no CUDA device is visible")
      ->check(device_choice());
  sub->add_option("--optim", o->over.optim, "Override the optimizer: sgd, adam or adamw");
  sub->add_option("--inject", o->inject,
                  "Turn on named bugs in the parallel code (comma-separated; docs/zoo.md): the verdict must catch\n"
                  "them and name their root. Same as PARITY_INJECT=NAME");
  sub->add_option("--lr", o->over.lr, "Override the learning rate (a finite number > 0)")->check(positive_real());
  sub->add_option("--report", o->report,
                  "World > 1: also write the verdict as JSON to FILE (a scenario with a resume object: phase 2's; "
                  "phase 1's goes to FILE.phase1.json)");
  sub->add_option("--timeout", o->timeout_s, "World > 1: per-collective timeout in seconds")
      ->check(positive_seconds())
      ->capture_default_str();
  sub->add_option("--deadline", o->deadline_s,
                  "World > 1: wall-clock limit in seconds for the ranks (each phase of a resume check); when it\n"
                  "passes every rank is stopped and the exit code is 3 (infrastructure failed). Default: none")
      ->check(positive_seconds());
  sub->add_option("--log-dir", o->log_dir, "World > 1: also write each rank's output to DIR/rank<r>.log");
  add_node_options(*sub, o->nnodes, o->node_rank, o->master);
  sub->add_option("--save-at", o->save_at,
                  "Save the layout's whole training state (world 1: the baseline's, a seed checkpoint) to --ckpt\n"
                  "DIR after K steps, then go on")
      ->check(non_negative_integer());
  sub->add_option("--ckpt", o->ckpt, "Checkpoint directory for --save-at (replaced atomically)");
  sub->add_option("--resume", o->resume,
                  "Load the training state from DIR (saved under any layout) and continue from its step; the\n"
                  "baseline replays the steps before it without comparing");
  sub->add_flag("--trace", o->trace,
                "Trace the verdict's step even when it passes (step 0; a failing verdict traces its first failing\n"
                "step anyway): the root names the first activation or activation gradient that diverges\n"
                "(docs/verdict.md \"The trace\")");
  sub->add_flag("--trajectory", o->over.trajectory,
                "World > 1: compare free-running trajectories (the layout never continues from the baseline's\n"
                "state; for bugs that only show across steps). Default: step-local (docs/verdict.md)");
  sub->add_flag("--as-rank", o->as_rank,
                "Run as one rank of the verdict, started by another launcher: mpirun, srun, torchrun-like\n"
                "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or `parity launch --nnodes`; docs/multihost.md");
  return {sub, [o, sub]() {
            if (!o->inject.empty()) setenv("PARITY_INJECT", o->inject.c_str(), 1);  // every rank inherits it
            const bool timeout_given = sub->get_option("--timeout")->count() > 0;
            if (o->as_rank) return run_rank([&] { return request_of(*o, timeout_given); }, o->scenario);
            return run_scenario(request_of(*o, timeout_given), rank_start(), o->scenario, o->every);
          }};
}

}  // namespace parity::cli
