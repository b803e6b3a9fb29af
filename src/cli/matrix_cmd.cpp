// `parity matrix [PATH...]`: the scenario matrix with one verdict. Every scenario file (a
// directory: its *.json, sorted; default scenarios/) of world > 1 runs as `parity run FILE
// --report R` (its ranks, its baseline, its verdict), JOBS at a time, one progress line
// each as it finishes; then a table (verdict, the closest any row came to its tolerance,
// the failing rows with their scale) and the matrix verdict. World-1 files have no layout
// to compare and are listed as skipped, never counted as passing. Exit 0 when every layout
// passed, 1 when one failed, 2 for bad input (nothing runs).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/self.h"
#include "core/device.h"
#include "core/error.h"
#include "harness/scenario.h"

extern char** environ;

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
};

struct Entry {
  std::string file, name;
  int64_t world = 1;
  std::string layout;  // "dps 2 x tp 2, ep 2", from the scenario
  int rc = -1;         // parity run's exit code
  double seconds = 0;
  nlohmann::json report;
};

std::string layout_short(const LayoutConfig& l) {
  std::string s;
  auto add = [&](const char* k, int64_t v) {
    if (v > 1) s += std::string(s.empty() ? "" : " x ") + k + " " + std::to_string(v);
  };
  add("dpr", l.dp_replicate), add("dps", l.dp_shard), add("tp", l.tp);
  if (l.sp) s += " (sp)";
  if (l.ep > 1) s += ", ep " + std::to_string(l.ep) + (l.etp > 1 ? " etp " + std::to_string(l.etp) : "");
  return s.empty() ? "one device" : s;
}

// Every file is parsed and validated before anything runs: bad input is exit 2, not a FAIL.
std::vector<Entry> load_entries(const std::vector<std::string>& files) {
  std::vector<Entry> out;
  for (const std::string& f : files) {
    const Scenario s = load_scenario(f);
    std::string layout = layout_short(s.layout);
    if (s.resume) layout += " -> " + layout_short(s.resume->layout);  // saved, then resumed there
    out.push_back({f, fs::path(f).stem().string(), s.layout.world, layout, -1, 0, {}});
  }
  return out;
}

// Starts `parity run` for one entry, output to LOG; returns its pid.
pid_t start_run(const Entry& e, const MatrixOptions& o, const std::string& report, const std::string& log) {
  std::vector<std::string> args{"run", e.file, "--report", report};
  if (!o.backend.empty()) args.insert(args.end(), {"--backend", o.backend});
  if (!o.dtype.empty()) args.insert(args.end(), {"--dtype", o.dtype});
  if (!o.device.empty()) args.insert(args.end(), {"--device", o.device});
  if (o.steps >= 0) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
  return spawn_self(args, log, "matrix: " + e.file);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The closest any row came to its tolerance (norm_rel / tol), and the root of a failure
// (verdict_root.h): its quantity, scale and step, and how many rows follow from it.
std::pair<double, std::string> summarize(const nlohmann::json& rep) {
  double margin = 0;
  std::string failing;
  if (!rep.is_object()) return {0, ""};
  for (const auto& r : rep["rows"]) {
    const double tol = r.value("tol", 0.0);
    if (r["norm_rel"].is_number() && tol > 0) margin = std::max(margin, r["norm_rel"].get<double>() / tol);
  }
  const auto root = rep.find("root");
  if (root != rep.end() && root->is_object()) {
    const auto& x = *root;
    const std::string factor = x["factor"].get<std::string>();  // the name, not the explanation
    char buf[256];
    std::snprintf(buf, sizeof buf, "root %s %s x%.4g at step %lld (%s)", x["quantity"].get<std::string>().c_str(),
                  x["subject"].get<std::string>().c_str(),
                  x["scale_ratio"].is_number() ? x["scale_ratio"].get<double>() : NAN,
                  static_cast<long long>(x["step"].get<int64_t>()), factor.substr(0, factor.find(':')).c_str());
    failing = buf;
    const size_t more = x["same_step"].size(), later = x["consequences"].size();
    if (more > 0) failing += " + " + std::to_string(more) + " more at that step";
    if (later > 0) failing += ", " + std::to_string(later) + " consequences";
  }
  return {margin, failing};
}

std::string verdict_of(const Entry& e) {
  if (e.world == 1) return "skipped";
  if (e.rc == 0) return "PASS";
  if (e.rc == 1) return "FAIL";
  if (e.rc == 77) return "not run";
  return "ERROR (exit " + std::to_string(e.rc) + ")";
}

void print_progress(const Entry& e, size_t done, size_t total, const std::string& log) {
  std::printf("[%zu/%zu] %-40s %-8s %6.2f s\n", done, total, e.name.c_str(), verdict_of(e).c_str(), e.seconds);
  if (e.rc != 0) {
    std::istringstream in(read_text(log));
    int shown = 0;
    for (std::string line; std::getline(in, line) && shown < 8;)
      if (line.rfind("root:", 0) == 0 || line.find("error") != std::string::npos || line.rfind("verdict:", 0) == 0)
        std::printf("    | %s\n", line.c_str()), ++shown;
    const char* fault = std::getenv("PARITY_FAULT");
    std::printf("    log: %s\n    replay: %s%s run %s\n", log.c_str(),
                fault != nullptr && *fault != '\0' ? ("PARITY_FAULT=" + std::string(fault) + " ").c_str() : "",
                self_exe().c_str(), fs::absolute(e.file).c_str());
  }
  std::fflush(stdout);
}

// Runs every world > 1 entry, at most o.jobs at a time.
void run_all(std::vector<Entry>& entries, const MatrixOptions& o, const std::string& dir) {
  std::map<pid_t, std::pair<size_t, Clock::time_point>> running;
  size_t next = 0, done = 0, total = 0;
  for (const Entry& e : entries) total += e.world > 1;
  auto log_of = [&](const Entry& e) { return dir + "/" + e.name + ".log"; };
  auto report_of = [&](const Entry& e) { return dir + "/" + e.name + ".report.json"; };
  for (;;) {
    while (running.size() < static_cast<size_t>(o.jobs) && next < entries.size()) {
      Entry& e = entries[next];
      if (e.world > 1) running[start_run(e, o, report_of(e), log_of(e))] = {next, Clock::now()};
      ++next;
    }
    if (running.empty()) return;
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, 0);
    const auto it = running.find(pid);
    if (it == running.end()) continue;
    Entry& e = entries[it->second.first];
    e.seconds = std::chrono::duration<double>(Clock::now() - it->second.second).count();
    e.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (fs::exists(report_of(e))) e.report = nlohmann::json::parse(read_text(report_of(e)), nullptr, false);
    running.erase(it);
    print_progress(e, ++done, total, log_of(e));
  }
}

int print_table(const std::vector<Entry>& entries, double wall) {
  std::printf("\n%-40s %5s  %-34s %-8s %9s %8s  %s\n", "scenario", "world", "layout", "verdict", "worst/tol", "time(s)",
              "root of a failure (quantity subject x scale at step)");
  int pass = 0, fail = 0, skipped = 0;
  for (const Entry& e : entries) {
    const auto [margin, failing] = summarize(e.report);
    const std::string v = verdict_of(e);
    char m[32] = "-";
    if (e.world > 1 && e.report.is_object()) std::snprintf(m, sizeof m, "%.2g", margin);
    std::printf("%-40s %5lld  %-34s %-8s %9s %8.2f  %s\n", e.name.c_str(), static_cast<long long>(e.world),
                e.layout.c_str(), v.c_str(), m, e.seconds, failing.c_str());
    (v == "PASS" ? pass : v == "skipped" ? skipped : fail) += 1;
  }
  std::printf("\nmatrix verdict: %s: %d passed, %d failed, %d skipped (world 1: no layout to compare), %.1f s\n",
              fail == 0 && pass > 0 ? "PASS" : "FAIL", pass, fail, skipped, wall);
  return fail == 0 && pass > 0 ? 0 : 1;
}

int run_matrix(MatrixOptions o) {
  const bool cuda = !o.device.empty() && parse_device(o.device) == Device::cuda;
  if (cuda) require_device(Device::cuda, "matrix --device cuda");
  if (o.jobs <= 0)
    o.jobs = cuda
                 ? 2
                 : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<Entry> entries = load_entries(scenario_files(o.paths));
  std::string dir = o.out;
  if (dir.empty()) {
    std::string t = (fs::temp_directory_path() / "parity-matrix-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw IoError("matrix: cannot create a temporary directory");
    dir = t;
  }
  fs::create_directories(dir);
  size_t layouts = 0;
  for (const Entry& e : entries) layouts += e.world > 1;
  std::printf("parity matrix: %zu scenarios (%zu layouts), %d at a time, reports and logs in %s\n", entries.size(),
              layouts, o.jobs, dir.c_str());
  std::fflush(stdout);
  const auto t0 = Clock::now();
  run_all(entries, o, dir);
  const int rc = print_table(entries, std::chrono::duration<double>(Clock::now() - t0).count());
  if (rc == 0 && o.out.empty()) fs::remove_all(dir);
  return rc;
}

}  // namespace

Command add_matrix_command(CLI::App& app) {
  auto o = std::make_shared<MatrixOptions>();
  CLI::App* sub = app.add_subcommand(
      "matrix", "Run every scenario's layout against its one-device baseline (`parity run` each) and give one "
                "verdict: a progress line per scenario, then a table and the matrix verdict. Exit 0 all layouts "
                "pass, 1 one fails, 2 bad input");
  sub->add_option("paths", o->paths, "Scenario files or directories of them (default: scenarios)");
  sub->add_option("-j,--jobs", o->jobs, "Scenarios run at once (default: the number of CPUs; 2 with --device cuda)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--out", o->out,
                  "Keep every report (NAME.report.json) and log (NAME.log) in DIR (default: a temporary directory, "
                  "removed when everything passes)");
  sub->add_option("--backend", o->backend, "Override every layout's backend: gloo, mpi or nccl");
  sub->add_option("--dtype", o->dtype, "Override every scenario's dtype: fp32 or fp64");
  sub->add_option("--device", o->device,
                  "Override every layout's device: cpu or cuda (baseline and ranks on the GPU; default --jobs 2).\n"
                  "Exit 77, nothing run, when no CUDA device is visible");
  sub->add_option("--steps", o->steps, "Override every scenario's number of steps")->check(CLI::NonNegativeNumber);
  return {sub, [o]() { return run_matrix(*o); }};
}

}  // namespace parity::cli
