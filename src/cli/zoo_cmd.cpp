// `parity zoo [NAMES]`: every named bug of core/inject.h turned on, one at a time, in the
// scenario that must catch it; the verdict must fail and its root line must name the
// expected quantity, step and factor. The runs are jobs, --jobs at a time; one table in the
// registry's order (a row printed once the rows above it are), exit 1 if a bug escapes or is misnamed.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/self.h"
#include "cli/zoo_run.h"
#include "core/error.h"
#include "core/precision.h"

namespace parity::cli {

Command add_zoo_command(CLI::App& app) {
  auto o = std::make_shared<ZooOptions>();
  CLI::App* sub = app.add_subcommand(
      "zoo",
      "Turn on each named bug of the parallel code (docs/zoo.md) in the scenario that must catch it, and check\n"
      "that the verdict fails and its root line names the expected quantity, step and factor. Exit 0 when\n"
      "every bug is caught and named, 1 when one escapes or is misnamed, 2 bad input");
  sub->add_option("names", o->names, "Bugs to run (default: all)");
  sub->add_option("-j,--jobs", o->jobs, "Bugs run at once (default: the number of CPUs); the table keeps its order")
      ->check(positive_integer());
  CLI::Option* scenarios =
      sub->add_option("--scenarios", o->scenarios, "Directory of the scenarios the bugs name (default: scenarios)");
  sub->add_option("--set", o->set,
                  "Run every bug in every scenario of directory DIR (scenarios/scale: production shapes) instead of "
                  "its own: a row per pair, caught and named, or \"cannot act\" with what the shape lacks")
      ->excludes(scenarios);
  sub->add_flag("--check-cannot", o->check_cannot,
                "With --set, run the pairs where a bug cannot act too: each must pass (the bug changed nothing)");
  sub->add_option("--out", o->out, "Keep every report and log in DIR (default: a temporary directory)");
  sub->add_option("--precision", o->precision,
                  "Run every bug in this precision policy (fp64, fp32, bf16, bf16-reduce-bf16, fp16, fp8, "
                  "fp8-delayed) instead of its scenario's own")
      ->check(precision_choice());
  sub->add_option("--backend", o->backend,
                  "Run every bug on this backend (gloo, mpi, nccl or sim: the same verdict, every rank a thread) "
                  "instead of its scenario's own")
      ->check(backend_choice());
  sub->add_flag("--trajectory", o->trajectory,
                "Run every bug under the free-running verdict (parity run --trajectory; docs/verdict.md)");
  sub->add_option("--junit", o->junit,
                  "Write JUnit XML to FILE: a testcase per bug (classname zoo), a failure when it escaped, was "
                  "misnamed or its run did not finish, with what was expected and what the verdict named");
  return {sub, [o]() { return run_zoo(*o); }};
}

}  // namespace parity::cli
