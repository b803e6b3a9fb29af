// `parity explain SCENARIO`: prints the scenario's mesh, each rank's coordinates in the
// dense and expert views, every group, and each parameter's placements and local shapes;
// `--ranges` adds each rank's global offset and index ranges of each parameter, `--param S`
// keeps the parameters whose name contains S (both tables). Last, the parameter plan
// (parallel/param_plan.h): each family's TP and DP reduction, dtype, norm count and clip, then
// each parameter's entry (placements of the parameter, its gradient and its optimizer state,
// model-parallel splits, storage, reductions in order, norm and clip, precision). The text is
// parallel/explain.h's: every parameter's placements are read from the plan.
// `--trace` (issue 45): the traced tensors with their placements per rank, from one traced step
// of the scenario on the simulated world (`parity run SCENARIO --backend sim --steps 1 --trace`):
// what each rank records and where it lands in the full tensor, through the canonical mapping the
// trace compares with (docs/verdict.md "The trace").
// A layout that cannot exist is refused with exit code 2 and a message naming the field.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/self.h"
#include "core/error.h"
#include "core/files.h"
#include "harness/scenario/scenario.h"
#include "parallel/explain.h"

namespace parity::cli {

namespace {

// One traced step of the scenario on the simulated world, its report's placements table.
int print_trace_placements(const std::string& scenario) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("parity_explain_trace_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string report = (dir / "report.json").string(), log = (dir / "run.log").string();
  const pid_t pid = spawn_self({"run", scenario, "--backend", "sim", "--steps", "1", "--trace", "--report", report},
                               log, "explain --trace");
  int st = 0;
  ::waitpid(pid, &st, 0);
  const std::string text =
      read_regular_if_exists(report, int64_t{64} << 20, Blame::damaged_data, "explain --trace report").value_or("");
  std::filesystem::remove_all(dir);
  const nlohmann::json rep = nlohmann::json::parse(text, nullptr, false);
  if (!rep.is_object() || !rep.contains("trace") || !rep["trace"].contains("placements")) {
    std::fprintf(stderr, "parity explain --trace: the traced run left no trace (exit %d)\n",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 1;
  }
  std::fputs("\n## Traced tensors (parity run --trace: what each rank records, where it lands in the full tensor; "
             "docs/verdict.md \"The trace\")\n",
             stdout);
  for (const auto& line : rep["trace"]["placements"]) std::fputs((line.get<std::string>() + "\n").c_str(), stdout);
  return 0;
}

}  // namespace

Command add_explain_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto opts = std::make_shared<ExplainOptions>();
  CLI::App* sub = app.add_subcommand(
      "explain", "Print the mesh, both views of every rank, every group, and each parameter's placements and local "
                 "shapes");
  sub->add_option("scenario", *path, "Scenario JSON file (docs/scenario.md)")->required();
  sub->add_flag("--ranges", opts->ranges,
                "Add each rank's global offset and index ranges (begin:end per dimension) of each parameter");
  sub->add_option("--param", opts->param, "Only the parameters whose name contains this text");
  auto trace = std::make_shared<bool>(false);
  sub->add_flag("--trace", *trace,
                "Add the traced tensors with their placements per rank: one traced step on the simulated world\n"
                "(what each rank records and where it lands in the full tensor; docs/verdict.md \"The trace\")");
  return {sub, [path, opts, trace]() {
            const Scenario s = load_scenario(*path, Rules::defer);  // validated once, here
            const ValidLayout valid = validate_scenario(s);
            std::fputs(explain(valid, s.model, "parity explain " + s.name, *opts).c_str(), stdout);
            return *trace ? print_trace_placements(*path) : 0;
          }};
}

}  // namespace parity::cli
