// `parity explain SCENARIO`: prints the scenario's mesh, each rank's coordinates in the
// dense and expert views, every group, and each parameter's placements and local shapes;
// `--ranges` adds each rank's global offset and index ranges of each parameter, `--param S`
// keeps the parameters whose name contains S (both tables). Last, the parameter plan
// (parallel/param_plan.h): each family's TP and DP reduction, dtype, norm count and clip, then
// each parameter's entry (placements of the parameter, its gradient and its optimizer state,
// model-parallel splits, storage, reductions in order, norm and clip, precision), printed from
// here since it belongs to the parallel layer, below mesh/explain.
// A layout that cannot exist is refused with exit code 2 and a message naming the field.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "harness/scenario/scenario.h"
#include "mesh/explain.h"
#include "parallel/pipeline.h"
#include "parallel/param_plan.h"

namespace parity::cli {

Command add_explain_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto opts = std::make_shared<mesh::ExplainOptions>();
  CLI::App* sub = app.add_subcommand(
      "explain", "Print the mesh, both views of every rank, every group, and each parameter's placements and local "
                 "shapes");
  sub->add_option("scenario", *path, "Scenario JSON file (docs/scenario.md)")->required();
  sub->add_flag("--ranges", opts->ranges,
                "Add each rank's global offset and index ranges (begin:end per dimension) of each parameter");
  sub->add_option("--param", opts->param, "Only the parameters whose name contains this text");
  return {sub, [path, opts]() {
            const Scenario s = load_scenario(*path);
            const std::string text = mesh::explain(s.layout, s.model, "parity explain " + s.name, *opts);
            std::fputs(text.c_str(), stdout);
            const ParamPlan plan = param_plan(mesh::Mesh(s.layout, s.model.layers), s.model, s.model.precision());
            std::fputs(("\n## Reduction plan (each family's gradient, step by step: parallel/reduction_plan.h)\n" +
                        plan_table(plan)).c_str(), stdout);
            const std::string entries = param_table(plan, opts->param);
            const std::string head = "\n## Parameter plan (each parameter's entry: parallel/param_plan.h)\n";
            std::fputs((head + entries).c_str(), stdout);
            if (s.layout.pp > 1) std::fputs(("\n" + schedule_table(s.layout, s.model.microbatches)).c_str(), stdout);
            return 0;
          }};
}

}  // namespace parity::cli
