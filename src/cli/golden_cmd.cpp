// `parity golden update|check SCENARIO...`: the option table; the jobs are
// harness/golden/golden_jobs.h (docs/golden.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/jobs.h"
#include "cli/numbers.h"
#include "cli/self.h"
#include "core/files.h"
#include "core/output.h"
#include "harness/golden/golden_jobs.h"

namespace parity::cli {

namespace {

void add_common(CLI::App* sub, GoldenOptions& o) {
  sub->add_option("scenarios", o.scenarios, "Scenario JSON files")->required();
  sub->add_option("--backend", o.backend, "Override the layout's backend (gloo, mpi, nccl, sim) for the run")
      ->check(backend_choice());
  sub->add_option("--golden-dir", o.dir, "Golden files' directory (default: ../golden next to the scenario)");
  sub->add_option("--timeout", o.timeout_s, "Per-collective timeout in seconds")->capture_default_str();
}

std::string perf_file(const std::string& dir, size_t i) { return dir + "/" + std::to_string(i) + ".perf.json"; }

// The children's shares of the suite's CPU time (a child that ended before writing one has none).
std::vector<PerfShare> read_shares(const std::string& dir, size_t n) {
  std::vector<PerfShare> out;
  for (size_t i = 0; i < n; ++i) {
    const auto text = read_regular_if_exists(perf_file(dir, i), int64_t{1} << 16, Blame::damaged_data, "perf share");
    if (text) out.push_back(parse_perf_share(*text, perf_file(dir, i)));
  }
  return out;
}

// `golden check` (or `update`) of several scenarios: each a child `parity golden check FILE`
// (the one job loop, cli/jobs.h), at most `jobs` at a time, its output printed whole in the
// scenarios' order, then a total and one verdict. Exit: the worst of the children (2 > 1 > 0).
// A child per scenario: each run's time and peak memory its own (the perf a golden pins).
int golden_in_jobs(const GoldenOptions& o, int jobs, bool update) {
  DirLock lock;  // a new temporary directory: this process's alone
  const std::string dir = jobs_dir("", "golden", lock);
  const std::string verb = update ? "update" : "check";
  std::vector<Job> list;
  for (size_t i = 0; i < o.scenarios.size(); ++i) {
    Job j{{"golden", verb, o.scenarios[i], "--timeout", std::to_string(o.timeout_s)},
          dir + "/" + std::to_string(i) + ".log", "golden " + verb + " " + o.scenarios[i]};
    if (update) j.args.insert(j.args.end(), {"--steps", std::to_string(o.steps)});
    if (!update)
      j.args.insert(j.args.end(), {"--max-lines", std::to_string(o.max_lines), "--perf-out", perf_file(dir, i)});
    if (!o.backend.empty()) j.args.insert(j.args.end(), {"--backend", o.backend});
    if (!o.dir.empty()) j.args.insert(j.args.end(), {"--golden-dir", o.dir});
    if (!o.perf) j.args.emplace_back("--no-perf");
    list.push_back(std::move(j));
  }
  std::printf("golden %s: %zu scenarios, %d at a time\n", verb.c_str(), list.size(), jobs);
  std::fflush(stdout);
  std::vector<JobEnd> ends(list.size());
  InOrder rows(list.size(), [&](size_t i) {
    // the child's output through the one bounded reader (a log the job never wrote prints nothing)
    const std::string text =
        read_regular_if_exists(list[i].log, int64_t{64} << 20, Blame::damaged_data, "golden check log").value_or("");
    std::fputs(text.c_str(), stdout);
    if (ends[i].rc > 2) std::printf("golden %s: FAIL: exit %d\n", o.scenarios[i].c_str(), ends[i].rc);
    std::fflush(stdout);
  });
  const auto t0 = std::chrono::steady_clock::now();
  run_jobs(list, jobs, start_self, [&](size_t i, const JobEnd& end) {
    ends[i] = end;
    rows.done(i);
  });
  int worst = 0, passed = 0, failed = 0, bad = 0;
  for (const JobEnd& e : ends) {
    worst = std::max(worst, e.rc == 2 ? 2 : e.rc == 0 ? 0 : 1);
    ++(e.rc == 0 ? passed : e.rc == 2 ? bad : failed);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const SuitePerf total = update ? SuitePerf{} : suite_perf(read_shares(dir, list.size()), list.size());
  if (total.compared) std::printf("\n%s", total.line.c_str());
  if (total.failed) worst = std::max(worst, 1);
  std::printf("\ngolden %s: %s: %zu scenarios, %d %s, %d failed%s%s, %.1f s\n", update ? "update" : "verdict",
              worst == 0 ? "PASS" : "FAIL", list.size(), passed, update ? "written" : "passed", failed,
              bad > 0 ? (", " + std::to_string(bad) + " bad input").c_str() : "",
              total.failed ? ", the suite's cpu time over its band" : "", wall);
  std::filesystem::remove_all(dir);
  return worst;
}

}  // namespace

Command add_golden_command(CLI::App& app) {
  auto o = std::make_shared<GoldenOptions>();
  CLI::App* sub = app.add_subcommand("golden",
                                     "Golden curves (docs/golden.md): per step loss, grad_norm, aux loss and\n"
                                     "tokens_per_expert of the baseline and the layout, pinned in\n"
                                     "golden/<file name>.json.");
  sub->require_subcommand(1);
  CLI::App* up = sub->add_subcommand("update", "Run each scenario (50 steps) and write its golden file");
  add_common(up, *o);
  up->add_option("--steps", o->steps, "Steps to pin")->capture_default_str()->check(steps_choice());
  auto up_jobs = std::make_shared<int>(1);
  up->add_option("-j,--jobs", *up_jobs,
                 "Scenarios updated at once, each its own process (default 1: the time and memory pinned are "
                 "measured with as little beside them as this command can make)")
      ->capture_default_str()
      ->check(positive_integer());
  CLI::App* check = sub->add_subcommand(
      "check", "Rerun each scenario and compare with its golden file; print the steps that differ; exit 1 if any");
  add_common(check, *o);
  check->add_option("--max-lines", o->max_lines, "Differing values to print per scenario")->capture_default_str();
  check->add_option("--perf-out", o->perf_out, "Write this check's cpu time and its pins here (the parent's total)")
      ->group("");  // hidden: `golden check` of several scenarios passes it to each child
  auto no_perf = std::make_shared<bool>(false);
  check->add_flag("--no-perf", *no_perf,
                  "Do not compare time and memory with the golden's (compared only on the machine that made it)");
  auto jobs = std::make_shared<int>(0);
  check->add_option("-j,--jobs", *jobs,
                    "Scenarios checked at once, each its own process, their output in the scenarios' order "
                    "(default: the number of CPUs)")
      ->check(positive_integer());
  return {sub, [o, up, jobs, up_jobs, no_perf]() {
            o->start = rank_start();
            o->perf = !*no_perf;
            if (up->parsed() && o->scenarios.size() > 1) return golden_in_jobs(*o, *up_jobs, true);
            if (up->parsed()) return golden_update(*o);
            if (o->scenarios.size() > 1) return golden_in_jobs(*o, *jobs > 0 ? *jobs : cpu_jobs(), false);
            return golden_check(*o);
          }};
}

}  // namespace parity::cli
