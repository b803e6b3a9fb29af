#include "cli/suggest.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace parity::cli {

namespace {

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

std::string_view undashed(std::string_view w) { return w.substr(std::min(w.find_first_not_of('-'), w.size())); }

// "-1", "-0.5", "-1e3": a negative number, a value rather than an option.
bool is_number(const std::string& s) {
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

// The subcommand of `app` called `name`, or nullptr (CLI11 2.1 has no get_subcommand that does not throw).
const CLI::App* subcommand(const CLI::App& app, const std::string& name) {
  const auto subs = app.get_subcommands([&](const CLI::App* s) { return s->check_name(name); });
  return subs.empty() ? nullptr : subs.front();
}

bool has_positionals(const CLI::App& app) {
  return !app.get_options([](const CLI::Option* o) { return o->get_positional(); }).empty();
}

}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
  // d[i][j]: a's first i characters to b's first j; three rows are all the recurrence reads.
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        cur[j] = std::min(cur[j], before[j - 2] + 1);  // two neighbours swapped
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> closest(std::string_view word, const std::vector<std::string>& candidates) {
  const size_t len = undashed(word).size();
  const size_t limit = len <= 1 ? 0 : len <= 4 ? 1 : len <= 8 ? 2 : 3;
  std::vector<std::string> best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best.clear();
    if (d == best_d && std::find(best.begin(), best.end(), c) == best.end()) best.push_back(c);
  }
  if (!best.empty() || len < 3) return best;
  for (const std::string& c : candidates)  // a prefix: "--summ" of "--summary" and "--summary-title"
    if (c.size() > word.size() && edit_distance(word, std::string_view(c).substr(0, word.size())) == 0)
      best.push_back(c);
  return best;
}

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (!s->get_name().empty()) out.push_back(s->get_name());
  return out;
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
    for (const std::string& s : o->get_snames()) out.push_back("-" + s);
  }
  return out;
}

std::optional<Misspelling> find_misspelling(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* cur = &app;
  std::string path = "parity";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;  // what follows is another command's (`parity launch -n 2 -- CMD`)
    if (a.size() > 1 && a[0] == '-' && !is_number(a)) {
      const bool is_long = a[1] == '-';
      // "--steps=3" is --steps; "-j2" is -j with its value attached.
      const std::string name = is_long ? a.substr(0, a.find('=')) : a.substr(0, 2);
      const CLI::Option* opt = cur->get_option_no_throw(name);
      if (opt == nullptr) return Misspelling{path, true, name, closest(name, option_names(*cur))};
      const bool value_attached = is_long ? a.find('=') != std::string::npos : a.size() > 2;
      // Its value is the next word, whatever it looks like; a flag takes none.
      if (opt->get_items_expected_max() > 0 && !value_attached) ++i;
      continue;
    }
    if (const CLI::App* sub = subcommand(*cur, a)) {
      cur = sub, path += " " + sub->get_name();
      continue;
    }
    // A word where no positional is taken names a subcommand: an unknown one.
    if (!has_positionals(*cur) && !command_names(*cur).empty())
      return Misspelling{path, false, a, closest(a, command_names(*cur))};
  }
  return std::nullopt;
}

std::string misspelling_message(const Misspelling& m) {
  std::string s = m.path + ": unknown " + (m.option ? "option" : "command") + " '" + m.word + "'";
  for (size_t k = 0; k < m.suggestions.size(); ++k)
    s += (k == 0 ? "; did you mean '" : k + 1 == m.suggestions.size() ? " or '" : ", '") + m.suggestions[k] + "'";
  if (!m.suggestions.empty()) s += "?";
  const std::string command = m.path == "parity" ? "" : m.path.substr(7);  // "parity run" -> "run"
  s += std::string(" (`parity help") + (command.empty() ? "" : " ") + command + "` lists the " +
       (m.option ? "options" : "commands") + ")";
  return s;
}

const CLI::App* find_command(const CLI::App& app, const std::vector<std::string>& words, size_t& bad) {
  const CLI::App* cur = &app;
  for (bad = 0; bad < words.size(); ++bad) {
    cur = subcommand(*cur, words[bad]);
    if (cur == nullptr) return nullptr;
  }
  return cur;
}

}  // namespace parity::cli
