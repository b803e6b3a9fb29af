#include "cli/matrix_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace parity::cli {

namespace {

std::string exit_text(int rc) { return "ERROR (exit " + std::to_string(rc) + ")"; }

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }

// A markdown table cell: '|' would end it, a line break would end the row.
std::string md_cell(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

// The first line of a failure's text, for the one-line message attribute.
std::string first_line(std::string_view text) { return std::string(text.substr(0, text.find('\n'))); }

std::string run_message(const MatrixEntry& e) {
  const std::string root = summarize_report(e.report).root;
  if (!root.empty()) return root;
  const std::string line = first_line(e.run.detail);
  return line.empty() ? "parity run exit " + std::to_string(e.run.rc) : line;
}

std::string golden_message(const MatrixEntry& e) {
  std::istringstream in(e.golden.detail);
  for (std::string line; std::getline(in, line);)
    if (contains(line, "FAIL")) return line;
  return "parity golden check exit " + std::to_string(e.golden.rc);
}

JunitCase testcase(const char* classname, const MatrixEntry& e, const MatrixJob& j, bool failed,
                   const std::string& skipped, const std::string& message) {
  return {classname, e.name, e.file, j.seconds, skipped, failed, message,
          j.detail + (j.log.empty() ? "" : "log: " + j.log + "\n")};
}

}  // namespace

std::string run_verdict(const MatrixEntry& e) {
  if (e.world == 1) return "skipped";
  if (e.run.rc == 0) return "PASS";
  if (e.run.rc == 1) return "FAIL";
  if (e.run.rc == 77) return "not run";
  if (e.run.rc == 4) return "DIVERGED";  // the baseline itself (core/exit_codes.h diverged)
  return exit_text(e.run.rc);
}

std::string golden_verdict(const MatrixEntry& e) {
  if (e.golden.rc < 0) return "-";
  if (e.golden.rc == 0) return "PASS";
  if (e.golden.rc == 1) return "FAIL";
  return exit_text(e.golden.rc);
}

bool run_failed(const MatrixEntry& e) { return e.world > 1 && e.run.rc != 0; }
bool golden_failed(const MatrixEntry& e) { return e.golden.rc > 0; }

ReportSummary summarize_report(const nlohmann::json& rep) {
  ReportSummary s;
  if (!rep.is_object()) return s;
  if (rep.contains("rows") && rep["rows"].is_array())
    for (const auto& r : rep["rows"]) {
      const double tol = r.value("tol", 0.0);
      if (r.contains("norm_rel") && r["norm_rel"].is_number() && tol > 0)
        s.worst_over_tol = std::max(s.worst_over_tol, r["norm_rel"].get<double>() / tol);
    }
  // A failure at rounding level judged again by twice the twins (docs/verdict.md "Measured again"): said beside
  // the root, or alone where the second verdict passed
  const auto again = rep.find("remeasured");
  const std::string measured = again != rep.end() && again->is_string() &&
                                       again->get<std::string>().rfind("the first measurement", 0) == 0
                                   ? "measured again (the first twins failed it at rounding level)"
                                   : "";
  const auto root = rep.find("root");
  if (root == rep.end() || !root->is_object()) {
    s.root = measured;
    return s;
  }
  const auto& x = *root;
  const std::string factor = x.value("factor", "");  // the name, not the explanation
  const double scale = x.contains("scale_ratio") && x["scale_ratio"].is_number() ? x["scale_ratio"].get<double>() : NAN;
  char buf[512];
  std::snprintf(buf, sizeof buf, "root %s %s x%.4g at step %lld (%s)", x.value("quantity", "?").c_str(),
                x.value("subject", "?").c_str(), scale, static_cast<long long>(x.value("step", int64_t{-1})),
                factor.substr(0, factor.find(':')).c_str());
  s.root = buf;
  const size_t more = x.contains("same_step") ? x["same_step"].size() : 0;
  const size_t later = x.contains("consequences") ? x["consequences"].size() : 0;
  if (more > 0) s.root += " + " + std::to_string(more) + " more at that step";
  if (later > 0) s.root += ", " + std::to_string(later) + " consequences";
  if (!measured.empty()) s.root += "; " + measured;
  return s;
}

std::string failure_lines(std::string_view log_text, bool golden, int max_lines) {
  std::string out;
  int kept = 0;  // lines that count against max_lines: a golden's, a run's FAIL rows
  size_t pos = 0;
  while (pos < log_text.size()) {
    const size_t end = std::min(log_text.find('\n', pos), log_text.size());
    const std::string_view line = log_text.substr(pos, end - pos);
    pos = end + 1;
    const bool always = !golden && (starts_with(line, "root:") || starts_with(line, "verdict:") ||
                                    contains(line, "error"));  // a run's root and verdict survive the cap
    const bool counted = golden ? contains(line, "golden") || starts_with(line, "  ") || contains(line, "error")
                                : starts_with(line, "FAIL");
    if (always || (counted && kept < max_lines)) out.append(line).append("\n"), kept += counted;
  }
  return out;
}


MatrixCounts count(const std::vector<MatrixEntry>& entries) {
  MatrixCounts c;
  for (const MatrixEntry& e : entries) {
    if (e.world == 1)
      ++c.skipped;
    else
      ++(run_failed(e) ? c.failed : c.passed);
    if (e.golden.rc >= 0) ++(golden_failed(e) ? c.golden_failed : c.golden_passed);
  }
  return c;
}

std::string junit_xml(const std::vector<MatrixEntry>& entries, double wall_seconds, const JunitSuite& suite,
                      const std::string& on_purpose) {
  std::vector<JunitCase> cases;
  for (const MatrixEntry& e : entries) {
    const std::string v = run_verdict(e);
    const std::string skip = e.world == 1  ? "world 1: no layout to compare"
                             : v == "not run" ? "not run: the run needs hardware this machine lacks (exit 77)"
                                              : "";
    const bool failed = skip.empty() && run_failed(e);
    const std::string mark = on_purpose.empty() ? "" : "(" + on_purpose + ") ";
    cases.push_back(testcase("verdict", e, e.run, failed, skip, failed ? mark + run_message(e) : ""));
    if (e.golden.rc >= 0)
      cases.push_back(
          testcase("golden", e, e.golden, golden_failed(e), "", golden_failed(e) ? mark + golden_message(e) : ""));
  }
  JunitSuite s = suite;
  if (s.name.empty()) s.name = "parity-matrix";
  return junit_xml(s, cases, wall_seconds);
}

std::string summary_markdown(const std::vector<MatrixEntry>& entries, const SummaryInfo& info) {
  const MatrixCounts c = count(entries);
  std::string md = "# parity matrix: " + std::string(c.pass() ? "PASS" : "FAIL") +
                   (info.on_purpose.empty() ? "" : " (injected on purpose)") + "\n\n";
  if (!info.on_purpose.empty())
    md += "**" + md_cell(info.on_purpose) + "**: the runs were given these bugs on purpose; a failure is what "
          "they should show, not a regression.\n\n";
  if (!info.title.empty()) md += info.title + "\n\n";
  if (!info.commit.empty()) {  // 12 hex digits, and a "-dirty" mark (`parity --version`) kept
    const size_t dash = info.commit.find('-');
    md += "commit `" + info.commit.substr(0, std::min<size_t>(dash, 12)) +
          (dash == std::string::npos ? "" : info.commit.substr(dash)) + "`, ";
  }
  md += info.date + (info.date.empty() ? "" : ", ") + std::to_string(entries.size()) + " scenarios: " +
        std::to_string(c.passed) + " layouts passed, " + std::to_string(c.failed) + " failed, " +
        std::to_string(c.skipped) + " skipped (world 1: no layout to compare)";
  if (info.golden)
    md += "; golden checks: " + std::to_string(c.golden_passed) + " passed, " + std::to_string(c.golden_failed) +
          " failed";
  md += "; " + fixed(info.wall_seconds, 1) + " s.\n";
  std::string failed_runs, failed_goldens;
  for (const MatrixEntry& e : entries) {
    if (run_failed(e)) failed_runs += (failed_runs.empty() ? "" : ", ") + e.name;
    if (golden_failed(e)) failed_goldens += (failed_goldens.empty() ? "" : ", ") + e.name;
  }
  if (!failed_runs.empty()) md += "\n**Failed layouts:** " + failed_runs + "\n";
  if (!failed_goldens.empty()) md += "\n**Failed golden checks:** " + failed_goldens + "\n";
  if (!info.logs_link.empty()) {
    const std::string dir = info.logs_link + "/";
    const std::string where = info.logs_temporary ? "`" + dir + "`, a temporary directory on the machine that ran "
                                                    "the matrix (`--out DIR` keeps them beside the summary)"
                              : info.links ? "[`" + dir + "`](" + dir + ")"
                                           : "`" + dir + "` beside the summary file";
    md += "\nLogs: " + where +
          " (NAME.log: `parity run`, NAME.report.json: its verdict as JSON, NAME.golden.log: `parity golden check`).\n";
  }
  const std::string head =
      "| scenario | world | layout | verdict | root of a failure | worst/tol | golden | time (s) |\n"
      "| --- | ---: | --- | --- | --- | ---: | --- | ---: |\n";
  auto link = [&](const std::string& text, const std::string& log) {
    if (!info.links || info.logs_temporary || info.logs_link.empty() || log.empty()) return text;
    const size_t slash = log.find_last_of('/');
    return "[" + text + "](" + info.logs_link + "/" + log.substr(slash == std::string::npos ? 0 : slash + 1) + ")";
  };
  std::string failed_rows, other_rows;
  for (const MatrixEntry& e : entries) {
    const ReportSummary s = summarize_report(e.report);
    const std::string v = run_verdict(e), g = golden_verdict(e);
    char worst[32] = "-";
    if (e.world > 1 && e.report.is_object()) std::snprintf(worst, sizeof worst, "%.2g", s.worst_over_tol);
    std::string& rows = run_failed(e) || golden_failed(e) ? failed_rows : other_rows;
    rows += "| " + link(md_cell(e.name), e.world > 1 ? e.run.log : "") + " | " + std::to_string(e.world) + " | " +
          md_cell(e.layout) + " | " + (run_failed(e) ? "**" + md_cell(v) + "**" : md_cell(v)) + " | " +
          (s.root.empty() ? "" : md_cell(s.root)) + " | " + worst + " | " +
          link(golden_failed(e) ? "**" + g + "**" : g, e.golden.rc >= 0 ? e.golden.log : "") + " | " +
          fixed(e.run.seconds + e.golden.seconds, 1) + " |\n";
  }
  if (!failed_rows.empty()) md += "\n" + head + failed_rows;
  if (!other_rows.empty()) {
    const size_t n = entries.size() - static_cast<size_t>(std::count(failed_rows.begin(), failed_rows.end(), '\n'));
    md += "\n<details><summary>" + std::to_string(n) + (failed_rows.empty() ? " scenarios" : " other scenarios") +
          " (passed or skipped): every row</summary>\n\n" + head + other_rows + "\n</details>\n";
  }
  if (!info.plots.empty()) {
    md += "\n## Plots (golden curves, a panel per scenario: loss over the baseline and the entropy floor; "
          "|layout - baseline| below)\n";
    if (!info.links) md += "\n";
    for (const auto& [group, stem] : info.plots)
      md += info.links ? "\n- **" + group + "**: [PNG](" + stem + ".png), [SVG](" + stem + ".svg)\n\n  ![" + group +
                             "](" + stem + ".png)\n"
                       : "- **" + group + "**: `" + stem + ".png`, `" + stem + ".svg`\n";
  }
  return md;
}

std::string plot_group(const std::string& name) {
  std::string g = name.substr(0, name.find('_'));
  g = g.substr(0, g.find_first_of("0123456789"));
  if (g == "tiny" || g == "small") return "one_device";
  if (g == "w") return "world_ep";
  return g.empty() ? "other" : g;
}

}  // namespace parity::cli
