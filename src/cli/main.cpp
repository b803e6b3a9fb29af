// `parity`: proves a parallel training layout computes what one device computes.
// Exit codes (the one table): 0 success / parity holds, 1 failure / parity broken, 2 bad input,
// 77 not run: the run needs hardware this machine lacks (a CUDA device); ctest shows it skipped.
#include <cstdio>
#include <exception>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "parity: runs a Mixture-of-Experts transformer on one device and under parallel layouts,\n"
      "and checks that every layout computes the same losses, gradients and updates.\n"
      "Scenario files: docs/scenario.md. Exit codes: 0 ok, 1 failed, 2 bad input, 77 not run (no GPU)."};
  app.require_subcommand(1);
  std::vector<parity::cli::Command> cmds{parity::cli::add_run_command(app), parity::cli::add_dump_command(app),
                                          parity::cli::add_bench_command(app), parity::cli::add_explain_command(app),
                                          parity::cli::add_launch_command(app), parity::cli::add_ckpt_command(app),
                                          parity::cli::add_golden_command(app), parity::cli::add_plot_command(app),
                                          parity::cli::add_matrix_command(app), parity::cli::add_zoo_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    for (auto& c : cmds)
      if (c.sub->parsed()) return c.run();
  } catch (const parity::ConfigError& e) {
    std::fprintf(stderr, "parity: error: %s\n", e.what());
    return 2;
  } catch (const parity::UnavailableError& e) {
    std::fprintf(stderr, "parity: not run: %s\n", e.what());
    return 77;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
