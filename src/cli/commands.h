// The subcommands of `parity`. Each registers itself on the CLI11 app and runs when chosen.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace parity::cli {

// A registered subcommand: the callback returns the process exit code.
using Runner = std::function<int()>;
struct Command {
  CLI::App* sub;
  Runner run;
};

Command add_run_command(CLI::App& app);
Command add_dump_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_launch_command(CLI::App& app);
Command add_explain_command(CLI::App& app);
Command add_ckpt_command(CLI::App& app);
Command add_golden_command(CLI::App& app);
Command add_plot_command(CLI::App& app);
Command add_matrix_command(CLI::App& app);
Command add_zoo_command(CLI::App& app);
Command add_cover_command(CLI::App& app);
Command add_rank_command(CLI::App& app);
// `parity help [COMMAND...]` (help_cmd.cpp); `parity version` and the --version flag (version_cmd.cpp).
Command add_help_command(CLI::App& app);
Command add_version_command(CLI::App& app);

// What `parity --version` prints, and the commit the binary was built from ("unknown" outside git).
std::string version_text();
std::string build_commit();

// The whole command line, as `main` runs it (argv[0] the program): the exit code. A rank
// started by fork alone (proc/launch.h, LaunchOptions::in_process) runs its argv through it.
int run_cli(int argc, char** argv);

}  // namespace parity::cli
