// `parity`: proves a parallel training layout computes what one device computes.
// Exit codes: the one table in core/exit_codes.h (0 ok, 1 parity broken, 2 bad input,
// 3 infrastructure failed, 4 baseline diverged, 77 not run here).
#include <signal.h>

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
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
  using Add = pc::Command (*)(CLI::App&);
  static constexpr std::pair<std::string_view, Add> kCommands[] = {
      {"run", pc::add_run_command},       {"dump", pc::add_dump_command},     {"compare", pc::add_compare_command},
      {"bench", pc::add_bench_command},   {"explain", pc::add_explain_command}, {"launch", pc::add_launch_command},
      {"ckpt", pc::add_ckpt_command},     {"golden", pc::add_golden_command}, {"plot", pc::add_plot_command},
      {"matrix", pc::add_matrix_command}, {"zoo", pc::add_zoo_command},       {"cover", pc::add_cover_command},
      {"rank", pc::add_rank_command},     {"help", pc::add_help_command},     {"version", pc::add_version_command}};
  // A command named exactly (not help, which reads every other) is built alone: every rank of
  // every run parses `parity rank FILE`, and building all fifteen commands' options was about a
  // tenth of an 8-rank run's CPU time (perf, fsdp8 at one step). Anything else (an alias, a
  // misspelling, --help, --version) gets them all, for its help and its "did you mean".
  const std::string_view first = argc > 1 ? std::string_view(argv[1]) : std::string_view();
  bool alone = false;
  for (const auto& [name, add] : kCommands) alone = alone || (first == name && name != "help");
  std::vector<pc::Command> cmds;
  for (const auto& [name, add] : kCommands)
    if (!alone || first == name) cmds.push_back(add(app));
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
