// "Did you mean": what `parity` says when a subcommand or an option on its command line is
// not one it knows (`parity matirx`, `parity run --stpes 3 S`), instead of CLI11's "A
// subcommand is required" or "arguments were not expected". Exit 2 (bad input), as any
// other misuse of the command line. Pure: reads the registered CLI::App, prints nothing.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace parity::cli {

// Edits from `a` to `b`, each costing 1: inserting, deleting or replacing a character, or
// swapping two neighbours (the optimal string alignment distance: "matirx" is 1 from "matrix").
// Letters compare without case.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidates close enough to `word` to be what was meant, closest first (all those at the
// smallest distance, in the candidates' order): at most 1 edit for a word of up to 4
// characters (leading dashes not counted), 2 up to 8, 3 beyond; a word of 1 character gets
// none. When no candidate is that close, those that `word` begins (3 characters at least).
std::vector<std::string> closest(std::string_view word, const std::vector<std::string>& candidates);

// An unknown word on a command line: a subcommand or an option of the command `path`.
struct Misspelling {
  std::string path;  // "parity", "parity run", "parity ckpt"
  bool option = false;
  std::string word;  // as typed, without "=VALUE"
  std::vector<std::string> suggestions;
};

// The first unknown subcommand or option of `args` (argv without the program) read the way
// `app` reads them; nullopt when every subcommand and option is known. Call it after a parse
// error only: a word where `app` takes positionals is never unknown.
std::optional<Misspelling> find_misspelling(const CLI::App& app, const std::vector<std::string>& args);

// "parity: unknown command 'matirx'; did you mean 'matrix'? (`parity help` lists the commands)"
std::string misspelling_message(const Misspelling& m);

// The subcommand `words` names under `app` (`{"ckpt", "inspect"}`), or nullptr, with `bad`
// the index of the first word that names none; for `parity help`.
const CLI::App* find_command(const CLI::App& app, const std::vector<std::string>& words, size_t& bad);

// The names of `app`'s subcommands and of its options ("--steps", "-j"), in registration order.
std::vector<std::string> command_names(const CLI::App& app);
std::vector<std::string> option_names(const CLI::App& app);

}  // namespace parity::cli
