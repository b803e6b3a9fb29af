// `parity help [COMMAND...]`: the help of a command, the same text `parity COMMAND --help`
// prints (`parity help ckpt inspect` is `parity ckpt inspect --help`); alone, the top-level
// help. An unknown command is exit 2 with the close names (cli/suggest.h). `parity help env`:
// the PARITY_* environment settings (core/knobs.h).
#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/suggest.h"
#include "core/exit_codes.h"
#include "core/knobs.h"

namespace parity::cli {

Command add_help_command(CLI::App& app) {
  auto words = std::make_shared<std::vector<std::string>>();
  CLI::App* sub = app.add_subcommand(
      "help", "Print a command's help, as `parity COMMAND --help` does (`parity help ckpt inspect`); alone, this one;\n"
              "`parity help env`: the PARITY_* environment settings");
  sub->add_option("command", *words, "A command and its subcommands, or env");
  return {sub, [&app, words] {
            if (*words == std::vector<std::string>{"env"}) {
              std::fputs(knobs_text().c_str(), stdout);
              return exit_code::ok;
            }
            size_t bad = 0;
            const CLI::App* cmd = find_command(app, *words, bad);
            if (cmd == nullptr) {  // words[bad] names no subcommand of the words before it
              const std::vector<std::string> known(words->begin(), words->begin() + static_cast<ptrdiff_t>(bad));
              size_t none = 0;
              const CLI::App* parent = find_command(app, known, none);
              std::string path = "parity";
              for (const std::string& k : known) path += " " + k;
              const std::string& w = (*words)[bad];
              const Misspelling m{path, false, w, closest(w, command_names(*parent))};
              std::fprintf(stderr, "%s\n", misspelling_message(m).c_str());
              return exit_code::bad_input;
            }
            // The name CLI11 gives the program (argv[0]) and the command's parents, as --help prints them.
            std::string prev = app.get_name();
            for (const CLI::App* p = cmd->get_parent(); p != nullptr && p != &app; p = p->get_parent())
              prev.insert(app.get_name().size(), " " + p->get_name());
            // app.help() would print the help of the subcommand parsed, `help` itself: the formatter is asked directly.
            const std::string text =
                cmd == &app ? app.get_formatter()->make_help(&app, prev, CLI::AppFormatMode::Normal) : cmd->help(prev);
            std::fputs(text.c_str(), stdout);
            return exit_code::ok;
          }};
}

}  // namespace parity::cli
