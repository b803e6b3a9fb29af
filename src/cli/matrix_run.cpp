// `parity matrix`, run (cli/matrix_run.h; its options: cli/matrix_cmd.cpp).
#include "cli/matrix_run.h"


#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/jobs.h"
#include "cli/matrix_report.h"
#include "cli/run_context.h"
#include "cli/self.h"
#include "core/device.h"
#include "core/error.h"
#include "core/files.h"
#include "core/inject.h"
#include "core/knobs.h"
#include "harness/golden/golden.h"
#include "harness/golden/plot.h"
#include "harness/scenario/scenario.h"

namespace parity::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Every file is parsed and validated before anything runs: bad input is exit 2, not a FAIL.
std::vector<MatrixEntry> load_entries(const std::vector<std::string>& files) {
  std::vector<MatrixEntry> out;
  for (const std::string& f : files) {
    const Scenario s = load_scenario(f);
    MatrixEntry e;
    e.file = f, e.name = fs::path(f).stem().string(), e.world = s.layout.world;
    e.layout = describe_layout(s.layout, LayoutText::brief);
    if (s.resume)
      e.layout += " -> " + describe_layout(s.resume->layout, LayoutText::brief);  // saved, then resumed there
    const fs::path golden = fs::path(f).parent_path() / ".." / "golden" / (fs::path(f).stem().string() + ".json");
    e.golden_file = golden.lexically_normal().string();
    out.push_back(std::move(e));
  }
  return out;
}

// A job's arguments: one entry's `parity run` (golden = false) or `parity golden check`.
std::string report_path(const std::string& dir, const MatrixEntry& e) { return dir + "/" + e.name + ".report.json"; }

Job make_job(const MatrixEntry& e, bool golden, const MatrixOptions& o, const std::string& dir) {
  std::vector<std::string> args;
  if (golden) {
    args = {"golden", "check", e.file, "--backend", o.golden_backend};
  } else {
    args = {"run", e.file, "--report", report_path(dir, e)};
    if (!o.backend.empty()) args.insert(args.end(), {"--backend", o.backend});
    if (!o.dtype.empty()) args.insert(args.end(), {"--precision", o.dtype});
    if (!o.device.empty()) args.insert(args.end(), {"--device", o.device});
    if (o.steps >= 0) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
    if (o.trajectory) args.push_back("--trajectory");
  }
  return {args, (golden ? e.golden : e.run).log, "matrix: " + e.file};
}

// A job's log or report in the matrix's own directory, through the bounded, regular-file reader
// (core/files.h): "" when it is missing or is not what parity wrote there.
std::string read_text(const std::string& path) {
  try {
    return read_regular_if_exists(path, int64_t{256} << 20, Blame::damaged_data, "matrix job file").value_or("");
  } catch (const Error&) {
    return "";
  }
}

// The command that replays a failed job by hand, with the environment that changed it.
std::string replay_line(const MatrixEntry& e, bool golden, const MatrixOptions& o) {
  std::string env;
  for (const char* var : {"PARITY_FAULT", "PARITY_INJECT"}) {
    const char* v = knob(var);
    if (v != nullptr && *v != '\0') env += std::string(var) + "=" + v + " ";
  }
  const std::string file = fs::absolute(e.file).string();
  if (golden) return env + self_exe() + " golden check " + file + " --backend " + o.golden_backend;
  return env + self_exe() + " run " + file + (o.dtype.empty() ? "" : " --precision " + o.dtype) +
         (o.trajectory ? " --trajectory" : "");
}

void print_progress(const MatrixEntry& e, bool golden, size_t done, size_t total, const MatrixOptions& o) {
  const MatrixJob& j = golden ? e.golden : e.run;
  std::printf("[%zu/%zu] %-40s %-6s %-8s %6.2f s\n", done, total, e.name.c_str(), golden ? "golden" : "run",
              (golden ? golden_verdict(e) : run_verdict(e)).c_str(), j.seconds);
  if (j.rc != 0) {
    // A run: its root and verdict (the rows are in the log and the JUnit); a golden: 6 lines.
    const std::string lines = failure_lines(j.detail, golden, golden ? 6 : 0);
    for (size_t pos = 0; pos < lines.size();) {
      const size_t end = lines.find('\n', pos);
      std::printf("    | %s\n", lines.substr(pos, end - pos).c_str());
      pos = end + 1;
    }
    std::printf("    log: %s\n    replay: %s\n", j.log.c_str(), replay_line(e, golden, o).c_str());
  }
  std::fflush(stdout);
}

// Runs every job (an entry's run or golden check, `which`), at most o.jobs at a time, in the
// order given: as each ends, its result goes into its entry and its progress line is printed.
void run_all(std::vector<MatrixEntry>& entries, const std::vector<std::pair<size_t, bool>>& which,
             const MatrixOptions& o, const std::string& dir) {
  std::vector<Job> jobs;
  for (const auto& [entry, golden] : which) jobs.push_back(make_job(entries[entry], golden, o, dir));
  size_t done = 0;
  run_jobs(jobs, o.jobs, start_self, [&](size_t i, const JobEnd& end) {
    const auto [entry, golden] = which[i];
    MatrixEntry& e = entries[entry];
    MatrixJob& j = golden ? e.golden : e.run;
    j.seconds = end.seconds, j.rc = end.rc;
    if (j.rc != 0) j.detail = failure_lines(read_text(j.log), golden);
    if (!golden && fs::exists(report_path(dir, e)))
      e.report = nlohmann::json::parse(read_text(report_path(dir, e)), nullptr, false);
    print_progress(e, golden, ++done, jobs.size(), o);
  });
}

int print_table(const std::vector<MatrixEntry>& entries, const MatrixOptions& o, double wall) {
  // As wide as the longest name and layout, so that the columns stay aligned, up to 64 columns
  // each (a longer one, such as a resume check's two layouts, pushes only its own row).
  int nw = 40, lw = 34;
  for (const MatrixEntry& e : entries)
    nw = std::max(nw, static_cast<int>(std::min<size_t>(e.name.size(), 64))),
    lw = std::max(lw, static_cast<int>(std::min<size_t>(e.layout.size(), 64)));
  std::printf("\n%-*s %5s  %-*s %-8s %9s %8s  %s%s\n", nw, "scenario", "world", lw, "layout", "verdict", "worst/tol",
              "time(s)", o.golden ? "golden  " : "", "root of a failure (quantity subject x scale at step)");
  for (const MatrixEntry& e : entries) {
    const ReportSummary s = summarize_report(e.report);
    char m[32] = "-";
    if (e.world > 1 && e.report.is_object()) std::snprintf(m, sizeof m, "%.2g", s.worst_over_tol);
    std::string g = o.golden ? golden_verdict(e) : "";
    if (o.golden) g.resize(std::max<size_t>(g.size() + 1, 8), ' ');
    std::printf("%-*s %5lld  %-*s %-8s %9s %8.2f  %s%s\n", nw, e.name.c_str(), static_cast<long long>(e.world), lw,
                e.layout.c_str(), run_verdict(e).c_str(), m, e.run.seconds + e.golden.seconds, g.c_str(),
                s.root.c_str());
  }
  const MatrixCounts c = count(entries);
  std::printf("\nmatrix verdict: %s: %d passed, %d failed, %d skipped (world 1: no layout to compare)",
              c.pass() ? "PASS" : "FAIL", c.passed, c.failed, c.skipped);
  if (o.golden) std::printf("; golden checks: %d passed, %d failed", c.golden_passed, c.golden_failed);
  std::printf(", %.1f s\n", wall);
  std::fflush(stdout);
  return c.pass() ? 0 : 1;
}

// The reports' paths were checked before the jobs ran (check_reports): no directory is created,
// and the write replaces only what an earlier matrix wrote there (core/output.h).
void write_file(const std::string& option, const std::string& path, const std::string& text,
                std::string_view signature) {
  write_file_atomically(path, text, Replace{signature}, "matrix " + option.substr(2), option);
}
constexpr const char* kJunitSignature = "<testsuite name=\"parity-matrix\"";
constexpr const char* kSummarySignature = "# parity matrix: ";

// One figure per scenario group (plot_group) from the golden files next to the scenarios
// (../golden/NAME.json); scenarios without a golden are left out. Returns (group, stem).
std::vector<std::pair<std::string, std::string>> draw_plots(const std::vector<MatrixEntry>& entries,
                                                            const std::string& dir) {
  std::map<std::string, std::vector<Golden>> groups;
  for (const MatrixEntry& e : entries)
    if (fs::exists(e.golden_file)) groups[plot_group(e.name)].push_back(load_golden(e.golden_file));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [group, goldens] : groups) {
    PlotOptions po;
    po.stem = dir + "/" + group;
    po.title = group + ": " + std::to_string(goldens.size()) + " scenarios, golden curves";
    plot_curves(goldens, po);
    out.emplace_back(group, po.stem);
  }
  std::printf("plots: %zu figures in %s\n", out.size(), dir.c_str());
  return out;
}

std::string relative_to(const std::string& path, const std::string& file_in_dir) {
  const fs::path from = fs::absolute(file_in_dir).parent_path();
  return fs::absolute(path).lexically_normal().lexically_relative(from.lexically_normal()).string();
}

// Every report path is parity's to write before anything runs (docs/faults.md "Nothing
// lost"): --out and --plots new, empty or parity's output directories, --junit and --summary
// new files in existing directories, or what an earlier matrix wrote there.
void check_reports(const MatrixOptions& o) {
  if (!o.out.empty()) check_output_dir("--out", o.out);
  if (!o.plots.empty()) check_output_dir("--plots", o.plots);
  if (!o.junit.empty()) check_output_file("--junit", o.junit, kJunitSignature);
  if (!o.summary.empty()) check_output_file("--summary", o.summary, kSummarySignature);
}

}  // namespace

int run_matrix(MatrixOptions o) {
  const bool cuda = !o.device.empty() && parse_device(o.device) == Device::cuda;
  if (!o.inject.empty()) setenv("PARITY_INJECT", o.inject.c_str(), 1);  // every run and golden check inherits it
  (void)injected_names();  // every name checked before anything runs: an unknown one is exit 2
  if (cuda) require_device(Device::cuda, "matrix --device cuda");
  std::vector<MatrixEntry> entries = load_entries(scenario_files(o.paths));
  check_reports(o);
  if (o.jobs <= 0) o.jobs = cuda ? 2 : cpu_jobs();
  DirLock lock;
  const std::string dir = jobs_dir(o.out, "matrix", lock);
  if (!o.plots.empty()) prepare_output_dir("--plots", o.plots);
  std::vector<std::pair<size_t, bool>> jobs;  // (entry, golden check)
  for (size_t i = 0; i < entries.size(); ++i) {
    MatrixEntry& e = entries[i];
    if (e.world > 1) e.run.log = dir + "/" + e.name + ".log", jobs.emplace_back(i, false);
    if (o.golden) e.golden.log = dir + "/" + e.name + ".golden.log", jobs.emplace_back(i, true);
  }
  const char* inject = knob("PARITY_INJECT");
  std::printf("parity matrix: %zu scenarios, %zu jobs (runs%s), %d at a time%s%s, reports and logs in %s\n",
              entries.size(), jobs.size(), o.golden ? (" and golden checks, " + o.golden_backend).c_str() : "",
              o.jobs, inject != nullptr && *inject != '\0' ? ", injected: " : "",
              inject != nullptr ? inject : "", dir.c_str());
  std::fflush(stdout);
  const auto t0 = Clock::now();
  run_all(entries, jobs, o, dir);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  int rc = print_table(entries, o, wall);
  SummaryInfo info;
  if (!o.plots.empty()) {
    try {
      info.plots = draw_plots(entries, o.plots);
    } catch (const Error& e) {  // gnuplot missing or failing: the artifacts are incomplete
      std::printf("plots: FAIL: %s\n", e.what());
      rc = 1;
    }
  }
  const RunContext ctx = run_context();
  if (!o.junit.empty()) {
    const JunitSuite suite = junit_suite(
        "parity-matrix", ctx,
        {{"device", o.device.empty() ? "each scenario's" : o.device},
         {"backend", o.backend.empty() ? "each scenario's" : o.backend},
         {"precision", o.dtype.empty() ? "each scenario's" : o.dtype},
         {"golden", o.golden ? "checked (" + o.golden_backend + ")" : "not checked"}});
    write_file("--junit", o.junit, junit_xml(entries, wall, suite, ctx.on_purpose()), kJunitSignature);
    std::printf("junit: %s\n", o.junit.c_str());
  }
  if (!o.summary.empty()) {
    info.title = o.summary_title, info.commit = ctx.commit, info.date = ctx.date, info.on_purpose = ctx.on_purpose();
    info.logs_temporary = o.out.empty();
    info.logs_link = info.logs_temporary ? fs::absolute(dir).lexically_normal().string() : relative_to(dir, o.summary);
    info.golden = o.golden, info.wall_seconds = wall;
    info.links = o.summary_links != "none";
    for (auto& [group, stem] : info.plots) stem = relative_to(stem, o.summary);
    write_file("--summary", o.summary, summary_markdown(entries, info), kSummarySignature);
    std::printf("summary: %s\n", o.summary.c_str());
  }
  // A summary with links links its logs: the temporary directory is kept then, and said so.
  const bool linked = !o.summary.empty() && info.links;
  if (o.out.empty() && (rc != 0 || linked))
    std::printf("logs: %s (a temporary directory, kept: %s; remove it when done, or name one with --out)\n",
                dir.c_str(), rc != 0 ? "the failures' logs" : "the summary links it");
  else if (o.out.empty())
    fs::remove_all(dir);
  return rc;
}

}  // namespace parity::cli
