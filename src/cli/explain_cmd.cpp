// `parity explain SCENARIO`: prints the scenario's mesh, each rank's coordinates in the
// dense and expert views, every group, and each parameter's placements and local shapes.
// A layout that cannot exist is refused with exit code 2 and a message naming the field.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "harness/scenario.h"
#include "mesh/explain.h"

namespace parity::cli {

Command add_explain_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "explain", "Print the mesh, both views of every rank, every group, and each parameter's placements and local "
                 "shapes");
  sub->add_option("scenario", *path, "Scenario JSON file (docs/scenario.md)")->required();
  return {sub, [path]() {
            const Scenario s = load_scenario(*path);
            const std::string text = mesh::explain(s.layout, s.model, "parity explain " + s.name);
            std::fputs(text.c_str(), stdout);
            return 0;
          }};
}

}  // namespace parity::cli
