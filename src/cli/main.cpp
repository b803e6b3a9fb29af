// `parity`: proves a parallel training layout computes what one device computes.
// Exit codes: the one table in core/exit_codes.h (0 ok, 1 parity broken, 2 bad input,
// 3 infrastructure failed, 4 baseline diverged, 77 not run here).
#include <signal.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/suggest.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "core/resources.h"
#include "core/text.h"

namespace parity::cli {

int run_cli(int argc, char** argv) {
  CLI::App app{
      "parity: runs a Mixture-of-Experts transformer on one device and under parallel layouts,\n"
      "and checks that every layout computes the same losses, gradients and updates.\n"
      "Scenario files: docs/scenario.md. Exit codes: 0 ok, 1 parity broken, 2 bad input, 3 infrastructure failed (a "
      "rank died or\nhung, a timeout, I/O, an exhausted resource), 4 the one-device baseline diverged (inf/NaN), 77 "
      "not run\nhere (no GPU, not enough memory)."};
  app.require_subcommand(1);
  app.footer(
      "`parity help COMMAND` (or `parity COMMAND --help`): a command's options. `parity --version`: the version, "
      "commit,\nbackends and CUDA built in.");
  namespace pc = parity::cli;
  std::vector<pc::Command> cmds{
      pc::add_run_command(app),     pc::add_dump_command(app),    pc::add_compare_command(app),
      pc::add_bench_command(app),   pc::add_explain_command(app), pc::add_launch_command(app),
      pc::add_ckpt_command(app),    pc::add_golden_command(app),  pc::add_plot_command(app),
      pc::add_matrix_command(app),  pc::add_zoo_command(app),     pc::add_cover_command(app),
      pc::add_rank_command(app),    pc::add_help_command(app),    pc::add_version_command(app)};
  strict_numbers(app);  // every numeric option of every subcommand (cli/numbers.h)
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // An unknown subcommand or option is named, with the close names ("did you mean"),
    // rather than CLI11's "A subcommand is required" or "arguments were not expected".
    if (const auto m = find_misspelling(app, std::vector<std::string>(argv + 1, argv + argc))) {
      std::fprintf(stderr, "%s\n", misspelling_message(*m).c_str());
      return parity::exit_code::bad_input;
    }
    app.exit(e);
    return parity::exit_code::bad_input;
  }
  try {
    for (auto& c : cmds)
      if (c.sub->parsed()) return c.run();
  } catch (const std::exception& e) {
    const int code = parity::exit_code::of(e);
    // Messages quote files and names: control characters are escaped (core/text.h), never obeyed.
    std::fprintf(stderr, "parity: %s: %s\n",
                 code == parity::exit_code::not_run    ? "not run"
                 : code == parity::exit_code::diverged ? "baseline diverged"
                                                       : "error",
                 parity::printable_lines(e.what()).c_str());
    return code;
  }
  return 1;
}

}  // namespace parity::cli

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) ends a write with EFBIG, reported as an I/O error naming the
  // limit (core/resources.h, exit 3), instead of killing the process by SIGXFSZ. Ignored
  // signals stay ignored in the ranks (fork and exec keep the disposition).
  signal(SIGXFSZ, SIG_IGN);
  parity::name_out_of_memory();  // a failed allocation says "out of memory" (core/resources.h), exit 3
  (void)parity::keep_freed_memory();  // a step's tensors reuse the last step's pages (core/resources.h)
  return parity::cli::run_cli(argc, argv);
}
