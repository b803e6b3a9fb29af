// `parity matrix [PATH...]`: the scenario matrix with one verdict. Every scenario file (a
// directory: its *.json, sorted; default scenarios/) of world > 1 runs as `parity run FILE
// --report R` (its ranks, its baseline, its verdict); with --golden every file, world 1
// included, also runs `parity golden check FILE --backend B`. Runs and checks are jobs, JOBS
// at a time, one progress line each as it finishes; then a table (verdict, the closest any
// row came to its tolerance, the root of a failure, the golden check) and the matrix
// verdict. World-1 files have no layout to compare and are listed as skipped, never counted
// as passing. The same results go to --junit (XML), --summary (markdown) and --plots (one
// figure per scenario group from the goldens): the gate (ci/gate) is this command plus ctest.
// Exit 0 when every layout and every golden check passed, 1 when one failed, 2 for bad input
// (nothing runs).
#include <memory>

#include "cli/commands.h"
#include "cli/matrix_run.h"
#include "cli/numbers.h"
#include "cli/self.h"

namespace parity::cli {

Command add_matrix_command(CLI::App& app) {
  auto o = std::make_shared<MatrixOptions>();
  CLI::App* sub = app.add_subcommand(
      "matrix",
      "Run every scenario's layout against its one-device baseline (`parity run` each), with --golden\n"
      "also every golden check, and give one verdict: a progress line per job, then a table and the\n"
      "matrix verdict. Exit 0 all layouts (and golden checks) pass, 1 one fails, 2 bad input");
  sub->add_option("paths", o->paths, "Scenario files or directories of them (default: scenarios)");
  sub->add_option("-j,--jobs", o->jobs,
                  "Runs and golden checks at once (default: the number of CPUs; 2 with --device cuda)")
      ->check(positive_integer());
  sub->add_option("--out", o->out,
                  "Keep every report (NAME.report.json) and log (NAME.log, NAME.golden.log) in DIR (default: a "
                  "temporary directory, removed when everything passes and no --summary links it)");
  sub->add_option("--backend", o->backend,
                  "Override every layout's backend in the runs: gloo, mpi, nccl or sim "
                  "(golden checks: --golden-backend)")
      ->check(backend_choice());
  sub->add_option("--precision,--dtype", o->dtype,
                  "Override every scenario's precision policy in the runs: fp64, fp32, bf16, bf16-reduce-bf16, fp16, "
                  "fp8 or fp8-delayed")
      ->check(precision_choice());
  sub->add_option("--device", o->device,
                  "Override every layout's device: cpu or cuda (baseline and ranks on the GPU; default --jobs 2).\n"
                  "Exit 77, nothing run, when no CUDA device is visible")
      ->check(device_choice());
  sub->add_option("--steps", o->steps, "Override every scenario's number of steps in the runs (a golden check runs "
                                       "its golden's steps)")
      ->check(steps_choice());
  sub->add_flag("--trajectory", o->trajectory,
                "Every layout's verdict on free-running trajectories (parity run --trajectory; docs/verdict.md)");
  sub->add_flag("--golden", o->golden,
                "Also `parity golden check` every scenario, world 1 included (docs/golden.md): a column of the "
                "table, and a golden that differs, is missing or stale fails the matrix");
  sub->add_option("--golden-backend", o->golden_backend, "The golden checks' backend")
      ->check(CLI::IsMember({"gloo", "mpi", "nccl"}))
      ->capture_default_str();
  sub->add_option("--junit", o->junit,
                  "Write JUnit XML to FILE: a testcase per run (classname verdict) and per golden check (classname "
                  "golden), a failure with the root line or the golden's differing values");
  sub->add_option(
      "--summary", o->summary,
      "Write the markdown summary to FILE: the verdict first, commit (env PARITY_COMMIT or GITHUB_SHA, else "
      "the build's), a row "
      "per scenario (verdict, root of a failure, worst/tol, golden, time) linking its logs, the plots");
  sub->add_option("--summary-title", o->summary_title, "A line under the summary's heading");
  sub->add_option("--summary-links", o->summary_links,
                  "relative: the summary links its logs and shows its plots, relative to the summary file (read "
                  "beside them); none: the same paths as text, no links or images (for $GITHUB_STEP_SUMMARY)")
      ->check(CLI::IsMember({"relative", "none"}))
      ->capture_default_str();
  sub->add_option("--plots", o->plots,
                  "Draw one figure per scenario group (fsdp, tp, ep, ...) from the goldens into DIR "
                  "(DIR/GROUP.png, .svg; gnuplot, as `parity plot`)");
  sub->add_option("--inject", o->inject,
                  "Turn on named bugs (comma-separated; docs/zoo.md) in every run and golden check, as "
                  "PARITY_INJECT=NAME does; an unknown name is exit 2 before anything runs");
  return {sub, [o]() { return run_matrix(*o); }};
}

}  // namespace parity::cli
