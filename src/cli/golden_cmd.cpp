// `parity golden update|check SCENARIO...`: the option table; the jobs are
// harness/golden/golden_jobs.h (docs/golden.md).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/self.h"
#include "harness/golden/golden_jobs.h"

namespace parity::cli {

namespace {

void add_common(CLI::App* sub, GoldenOptions& o) {
  sub->add_option("scenarios", o.scenarios, "Scenario JSON files")->required();
  sub->add_option("--backend", o.backend, "Override the layout's backend (gloo, mpi, nccl) for the run")
      ->check(backend_choice());
  sub->add_option("--golden-dir", o.dir, "Golden files' directory (default: ../golden next to the scenario)");
  sub->add_option("--timeout", o.timeout_s, "Per-collective timeout in seconds")->capture_default_str();
}

}  // namespace

Command add_golden_command(CLI::App& app) {
  auto o = std::make_shared<GoldenOptions>();
  CLI::App* sub = app.add_subcommand("golden",
                                     "Golden curves (docs/golden.md): per step loss, grad_norm, aux loss and\n"
                                     "tokens_per_expert of the baseline and the layout, pinned in golden/<name>.json.");
  sub->require_subcommand(1);
  CLI::App* up = sub->add_subcommand("update", "Run each scenario (50 steps) and write its golden file");
  add_common(up, *o);
  up->add_option("--steps", o->steps, "Steps to pin")->capture_default_str()->check(steps_choice());
  CLI::App* check = sub->add_subcommand(
      "check", "Rerun each scenario and compare with its golden file; print the steps that differ; exit 1 if any");
  add_common(check, *o);
  check->add_option("--max-lines", o->max_lines, "Differing values to print per scenario")->capture_default_str();
  return {sub, [o, up]() {
            o->start = rank_start();
            return up->parsed() ? golden_update(*o) : golden_check(*o);
          }};
}

}  // namespace parity::cli
