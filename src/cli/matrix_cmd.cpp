// `parity matrix [PATH...]`: the scenario matrix with one verdict. Every scenario file (a
// directory: its *.json, sorted; default scenarios/) of world > 1 runs as `parity run FILE
// --report R` (its ranks, its baseline, its verdict); with --golden every file, world 1
// included, also runs `parity golden check FILE --backend B`. Runs and checks are jobs, JOBS
// at a time, one progress line each as it finishes; then a table (verdict, the closest any
// row came to its tolerance, the root of a failure, the golden check) and the matrix
// verdict. World-1 files have no layout to compare and are listed as skipped, never counted
// as passing. The same results go to --junit (XML), --summary (markdown) and --plots (one
// figure per scenario group from the goldens): the gate (ci/gate) is this command plus ctest.
// Exit 0 when every layout and every golden check passed, 1 when one failed, 2 for bad input
// (nothing runs).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/matrix_report.h"
#include "cli/self.h"
#include "core/device.h"
#include "core/error.h"
#include "core/files.h"
#include "core/inject.h"
#include "harness/golden/golden.h"
#include "harness/golden/plot.h"
#include "harness/scenario/scenario.h"

namespace parity::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct MatrixOptions {
  std::vector<std::string> paths{"scenarios"};
  int jobs = 0;  // 0: the number of CPUs (cpu), 2 (cuda: every rank holds a CUDA context on the GPU)
  std::string device;
  std::string out, backend, dtype;
  int64_t steps = -1;
  bool golden = false;
  std::string golden_backend = "mpi";
  std::string junit, summary, summary_title, plots, inject;
};


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
    e.golden_file = (fs::path(f).parent_path() / ".." / "golden" / (s.name + ".json")).lexically_normal().string();
    out.push_back(std::move(e));
  }
  return out;
}

// A job: one entry's `parity run` (golden = false) or `parity golden check`.
struct Job {
  size_t entry;
  bool golden;
};

std::string report_path(const std::string& dir, const MatrixEntry& e) { return dir + "/" + e.name + ".report.json"; }

pid_t start_job(const MatrixEntry& e, bool golden, const MatrixOptions& o, const std::string& dir) {
  std::vector<std::string> args;
  if (golden) {
    args = {"golden", "check", e.file, "--backend", o.golden_backend};
  } else {
    args = {"run", e.file, "--report", report_path(dir, e)};
    if (!o.backend.empty()) args.insert(args.end(), {"--backend", o.backend});
    if (!o.dtype.empty()) args.insert(args.end(), {"--precision", o.dtype});
    if (!o.device.empty()) args.insert(args.end(), {"--device", o.device});
    if (o.steps >= 0) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
  }
  const MatrixJob& j = golden ? e.golden : e.run;
  return spawn_self(args, j.log, "matrix: " + e.file);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The command that replays a failed job by hand, with the environment that changed it.
std::string replay_line(const MatrixEntry& e, bool golden, const MatrixOptions& o) {
  std::string env;
  for (const char* var : {"PARITY_FAULT", "PARITY_INJECT"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') env += std::string(var) + "=" + v + " ";
  }
  const std::string file = fs::absolute(e.file).string();
  return env + self_exe() + (golden ? " golden check " + file + " --backend " + o.golden_backend : " run " + file);
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

// Runs every job, at most o.jobs at a time, in the order given.
void run_jobs(std::vector<MatrixEntry>& entries, const std::vector<Job>& jobs, const MatrixOptions& o,
              const std::string& dir) {
  std::map<pid_t, std::pair<size_t, Clock::time_point>> running;  // pid -> (job, start)
  size_t next = 0, done = 0;
  for (;;) {
    while (running.size() < static_cast<size_t>(o.jobs) && next < jobs.size()) {
      running[start_job(entries[jobs[next].entry], jobs[next].golden, o, dir)] = {next, Clock::now()};
      ++next;
    }
    if (running.empty()) return;
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, 0);
    const auto it = running.find(pid);
    if (it == running.end()) continue;
    const Job& job = jobs[it->second.first];
    MatrixEntry& e = entries[job.entry];
    MatrixJob& j = job.golden ? e.golden : e.run;
    j.seconds = std::chrono::duration<double>(Clock::now() - it->second.second).count();
    j.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (j.rc != 0) j.detail = failure_lines(read_text(j.log), job.golden);
    if (!job.golden && fs::exists(report_path(dir, e)))
      e.report = nlohmann::json::parse(read_text(report_path(dir, e)), nullptr, false);
    running.erase(it);
    print_progress(e, job.golden, ++done, jobs.size(), o);
  }
}

int print_table(const std::vector<MatrixEntry>& entries, const MatrixOptions& o, double wall) {
  std::printf("\n%-40s %5s  %-34s %-8s %9s %8s  %s%s\n", "scenario", "world", "layout", "verdict", "worst/tol",
              "time(s)", o.golden ? "golden  " : "", "root of a failure (quantity subject x scale at step)");
  for (const MatrixEntry& e : entries) {
    const ReportSummary s = summarize_report(e.report);
    char m[32] = "-";
    if (e.world > 1 && e.report.is_object()) std::snprintf(m, sizeof m, "%.2g", s.worst_over_tol);
    std::string g = o.golden ? golden_verdict(e) : "";
    if (o.golden) g.resize(std::max<size_t>(g.size() + 1, 8), ' ');
    std::printf("%-40s %5lld  %-34s %-8s %9s %8.2f  %s%s\n", e.name.c_str(), static_cast<long long>(e.world),
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

// The reports' paths were checked before the jobs ran (check_reports): no directory is created.
void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f.flush()) throw IoError("matrix: cannot write " + path);
}

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

// PARITY_COMMIT, else GITHUB_SHA, else "".
std::string commit_from_env() {
  for (const char* var : {"PARITY_COMMIT", "GITHUB_SHA"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return v;
  }
  return "";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
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
  if (!o.junit.empty()) check_output_file("--junit", o.junit, "<testsuite name=\"parity-matrix\"");
  if (!o.summary.empty()) check_output_file("--summary", o.summary, "# parity matrix: ");
}

int run_matrix(MatrixOptions o) {
  const bool cuda = !o.device.empty() && parse_device(o.device) == Device::cuda;
  if (!o.inject.empty()) setenv("PARITY_INJECT", o.inject.c_str(), 1);  // every run and golden check inherits it
  (void)injected_names();  // every name checked before anything runs: an unknown one is exit 2
  if (cuda) require_device(Device::cuda, "matrix --device cuda");
  std::vector<MatrixEntry> entries = load_entries(scenario_files(o.paths));
  check_reports(o);
  if (o.jobs <= 0) o.jobs = cuda ? 2 : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::string dir = o.out;
  if (dir.empty()) {
    std::string t = (fs::temp_directory_path() / "parity-matrix-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw IoError("matrix: cannot create a temporary directory");
    dir = t;
  }
  if (!o.out.empty()) prepare_output_dir("--out", dir);
  if (!o.plots.empty()) prepare_output_dir("--plots", o.plots);
  std::vector<Job> jobs;
  for (size_t i = 0; i < entries.size(); ++i) {
    MatrixEntry& e = entries[i];
    if (e.world > 1) e.run.log = dir + "/" + e.name + ".log", jobs.push_back({i, false});
    if (o.golden) e.golden.log = dir + "/" + e.name + ".golden.log", jobs.push_back({i, true});
  }
  const char* inject = std::getenv("PARITY_INJECT");
  std::printf("parity matrix: %zu scenarios, %zu jobs (runs%s), %d at a time%s%s, reports and logs in %s\n",
              entries.size(), jobs.size(), o.golden ? (" and golden checks, " + o.golden_backend).c_str() : "",
              o.jobs, inject != nullptr && *inject != '\0' ? ", injected: " : "",
              inject != nullptr ? inject : "", dir.c_str());
  std::fflush(stdout);
  const auto t0 = Clock::now();
  run_jobs(entries, jobs, o, dir);
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
  if (!o.junit.empty()) write_file(o.junit, junit_xml(entries, wall)), std::printf("junit: %s\n", o.junit.c_str());
  if (!o.summary.empty()) {
    info.title = o.summary_title, info.commit = commit_from_env(), info.date = utc_now();
    info.logs_link = relative_to(dir, o.summary), info.golden = o.golden, info.wall_seconds = wall;
    for (auto& [group, stem] : info.plots) stem = relative_to(stem, o.summary);
    write_file(o.summary, summary_markdown(entries, info));
    std::printf("summary: %s\n", o.summary.c_str());
  }
  if (rc == 0 && o.out.empty() && o.summary.empty()) fs::remove_all(dir);  // a summary links its logs
  return rc;
}

}  // namespace

Command add_matrix_command(CLI::App& app) {
  auto o = std::make_shared<MatrixOptions>();
  CLI::App* sub = app.add_subcommand(
      "matrix", "Run every scenario's layout against its one-device baseline (`parity run` each), with --golden "
                "also every golden check, and give one verdict: a progress line per job, then a table and the "
                "matrix verdict. Exit 0 all layouts (and golden checks) pass, 1 one fails, 2 bad input");
  sub->add_option("paths", o->paths, "Scenario files or directories of them (default: scenarios)");
  sub->add_option("-j,--jobs", o->jobs,
                  "Runs and golden checks at once (default: the number of CPUs; 2 with --device cuda)")
      ->check(positive_integer());
  sub->add_option("--out", o->out,
                  "Keep every report (NAME.report.json) and log (NAME.log, NAME.golden.log) in DIR (default: a "
                  "temporary directory, removed when everything passes and no --summary links it)");
  sub->add_option("--backend", o->backend,
                  "Override every layout's backend in the runs: gloo, mpi or nccl (golden checks: --golden-backend)")
      ->check(backend_choice());
  sub->add_option("--precision,--dtype", o->dtype,
                  "Override every scenario's precision policy in the runs: fp64, fp32, bf16 or bf16-reduce-bf16");
  sub->add_option("--device", o->device,
                  "Override every layout's device: cpu or cuda (baseline and ranks on the GPU; default --jobs 2).\n"
                  "Exit 77, nothing run, when no CUDA device is visible")
      ->check(device_choice());
  sub->add_option("--steps", o->steps, "Override every scenario's number of steps in the runs (a golden check runs "
                                       "its golden's steps)")
      ->check(non_negative_integer());
  sub->add_flag("--golden", o->golden,
                "Also `parity golden check` every scenario, world 1 included (docs/golden.md): a column of the "
                "table, and a golden that differs, is missing or stale fails the matrix");
  sub->add_option("--golden-backend", o->golden_backend, "The golden checks' backend")
      ->check(CLI::IsMember({"gloo", "mpi", "nccl"}))
      ->capture_default_str();
  sub->add_option("--junit", o->junit,
                  "Write JUnit XML to FILE: a testcase per run (classname verdict) and per golden check (classname "
                  "golden), a failure with the root line or the golden's differing values");
  sub->add_option("--summary", o->summary,
                  "Write the markdown summary to FILE: the verdict, commit (env PARITY_COMMIT or GITHUB_SHA), a row "
                  "per scenario (verdict, root of a failure, worst/tol, golden, time) linking its logs, the plots");
  sub->add_option("--summary-title", o->summary_title, "A line under the summary's heading");
  sub->add_option("--plots", o->plots,
                  "Draw one figure per scenario group (fsdp, tp, ep, ...) from the goldens into DIR "
                  "(DIR/GROUP.png, .svg; gnuplot, as `parity plot`)");
  sub->add_option("--inject", o->inject,
                  "Turn on named bugs (comma-separated; docs/zoo.md) in every run and golden check, as "
                  "PARITY_INJECT=NAME does; an unknown name is exit 2 before anything runs");
  return {sub, [o]() { return run_matrix(*o); }};
}

}  // namespace parity::cli
