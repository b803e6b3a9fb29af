// `parity zoo`, run (cli/zoo_run.h; its options: cli/zoo_cmd.cpp).
#include "cli/zoo_run.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/jobs.h"
#include "cli/run_context.h"
#include "cli/zoo_report.h"
#include "core/error.h"
#include "core/files.h"
#include "core/inject.h"

namespace parity::cli {

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int rc = -1;
  std::string root, factor;  // as the verdict named them
  int64_t step = -1;
  std::string verdict;  // "ok", "ESCAPED" (the run passed), "MISNAMED", "ERROR (exit n)"
  double seconds = 0;
};

std::string root_text(const nlohmann::json& root) {
  const std::string subject = root.value("subject", "");
  return root.value("quantity", "") + (subject.empty() ? "" : " " + subject);
}

// An expected root or factor may name alternatives, "A|B": a bug whose effect is within a
// 16-bit policy's loss bound first shows in the gradients (docs/zoo.md).
bool any_of_alternatives(std::string_view alts, const std::function<bool(std::string_view)>& ok) {
  for (size_t at = 0;;) {
    const size_t bar = alts.find('|', at);
    if (ok(alts.substr(at, bar == std::string_view::npos ? std::string_view::npos : bar - at))) return true;
    if (bar == std::string_view::npos) return false;
    at = bar + 1;
  }
}

std::string report_path(const Injection& bug, const std::string& dir) {
  return dir + "/" + std::string(bug.name) + ".report.json";
}

// The bug's run: its scenario with the bug turned on, the report and the log in dir.
Job make_job(const Injection& bug, const ZooOptions& o, const std::string& dir) {
  const std::string name(bug.name), scenario = o.scenarios + "/" + std::string(bug.scenario);
  std::vector<std::string> args{"run", scenario, "--inject", name, "--report", report_path(bug, dir)};
  if (!o.precision.empty()) args.insert(args.end(), {"--precision", o.precision});
  if (o.trajectory) args.push_back("--trajectory");
  if (!o.backend.empty()) args.insert(args.end(), {"--backend", o.backend});
  return {args, dir + "/" + name + ".log", "zoo: " + name};
}

// What the run's exit code and report say against what the registry expects.
Outcome judge(const Injection& bug, const JobEnd& end, const std::string& dir) {
  Outcome r;
  r.seconds = end.seconds, r.rc = end.rc;
  std::string text;
  try {  // the bounded, regular-file reader (core/files.h); a report that is not one reads as none
    text = read_regular_if_exists(report_path(bug, dir), int64_t{64} << 20, Blame::damaged_data, "zoo report")
               .value_or("");
  } catch (const Error&) {
  }
  const nlohmann::json rep = nlohmann::json::parse(text, nullptr, false);
  if (rep.is_object() && rep.contains("root") && rep["root"].is_object()) {
    r.root = root_text(rep["root"]);
    r.step = rep["root"].value("step", int64_t{-1});
    r.factor = rep["root"].value("factor", "");
  }
  if (r.rc == 0)
    r.verdict = "ESCAPED";
  else if (r.rc != 1)
    r.verdict = "ERROR (exit " + std::to_string(r.rc) + ")";
  else if (!any_of_alternatives(bug.root, [&](std::string_view a) { return r.root == a; }) || r.step != bug.step ||
           !any_of_alternatives(bug.factor, [&](std::string_view a) { return r.factor.find(a) != std::string::npos; }))
    r.verdict = "MISNAMED";
  else
    r.verdict = "ok";
  return r;
}

// The bug's row of the table, with what was expected and its log under a row that is not "ok".
void print_row(const Injection& b, const Outcome& r, const std::string& dir) {
  std::printf("%-28s %-46s %-10s %5.2fs  %s at step %lld: %s", std::string(b.name).c_str(),
              std::string(b.scenario).c_str(), r.verdict.c_str(), r.seconds, r.root.empty() ? "-" : r.root.c_str(),
              static_cast<long long>(r.step), r.factor.c_str());
  if (r.verdict != "ok")
    std::printf("\n    expected %s at step %lld, factor containing \"%s\"; log %s/%s.log", std::string(b.root).c_str(),
                static_cast<long long>(b.step), std::string(b.factor).c_str(), dir.c_str(),
                std::string(b.name).c_str());
  std::printf("\n");
  std::fflush(stdout);
}

ZooResult result(const Injection& b, const Outcome& r, const ZooOptions& o, const std::string& dir) {
  const std::string expected = std::string(b.root) + " at step " + std::to_string(b.step) + ", factor containing \"" +
                               std::string(b.factor) + "\"";
  const std::string named = r.root.empty() ? "" : r.root + " at step " + std::to_string(r.step) + ": " + r.factor;
  ZooResult z{std::string(b.name), std::string(b.scenario), expected, named, r.verdict, "", r.seconds};
  if (!o.out.empty() || r.verdict != "ok") z.log = dir + "/" + z.bug + ".log";  // else the directory is removed
  return z;
}

}  // namespace

int run_zoo(ZooOptions o) {
  std::vector<const Injection*> bugs;
  if (o.names.empty())
    for (const auto& i : injections()) bugs.push_back(&i);
  else
    for (const auto& n : o.names) bugs.push_back(&find_injection(n));
  for (const Injection* b : bugs)
    if (!fs::exists(o.scenarios + "/" + std::string(b->scenario)))
      throw ConfigError("--scenarios", o.scenarios + "/" + std::string(b->scenario) +
                                           ": missing (run from the project root or name the scenario directory)");
  // What parity may write (docs/faults.md "Nothing lost"), checked before any bug runs.
  if (!o.out.empty()) check_output_dir("--out", o.out);
  if (!o.junit.empty()) check_output_file("--junit", o.junit, "<testsuite name=\"parity-zoo\"");
  if (o.jobs <= 0) o.jobs = cpu_jobs();
  DirLock lock;
  const std::string dir = jobs_dir(o.out, "zoo", lock);
  std::printf("%-28s %-46s %-10s %6s  %s\n", "bug", "scenario", "verdict", "time", "root named (expected)");
  std::vector<Job> jobs;
  for (const Injection* b : bugs) jobs.push_back(make_job(*b, o, dir));
  // The rows in the registry's order whatever order the runs end in: each once those above it are printed.
  std::vector<Outcome> outcomes(bugs.size());
  InOrder rows(bugs.size(), [&](size_t i) { print_row(*bugs[i], outcomes[i], dir); });
  const auto t0 = std::chrono::steady_clock::now();
  run_jobs(jobs, o.jobs, start_self, [&](size_t i, const JobEnd& end) {
    outcomes[i] = judge(*bugs[i], end, dir);
    rows.done(i);
  });
  int bad = 0;
  std::vector<ZooResult> results;
  for (size_t i = 0; i < bugs.size(); ++i) {
    bad += outcomes[i].verdict != "ok";
    results.push_back(result(*bugs[i], outcomes[i], o, dir));
  }
  if (!o.junit.empty()) {
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const JunitSuite suite = junit_suite(
        "parity-zoo", run_context(),
        {{"precision", o.precision.empty() ? "each scenario's" : o.precision},
         {"bugs", "each case turns on its own bug on purpose (parity zoo): a caught bug passes"}});
    write_file_atomically(o.junit, zoo_junit_xml(results, wall, suite), Replace{"<testsuite name=\"parity-zoo\""},
                          "zoo JUnit file", "--junit");
    std::printf("junit: %s\n", o.junit.c_str());
  }
  std::printf("\nzoo verdict: %s: %zu bugs, %zu caught with their root named, %d escaped or misnamed\n",
              bad == 0 ? "PASS" : "FAIL", bugs.size(), bugs.size() - static_cast<size_t>(bad), bad);
  if (bad == 0 && o.out.empty()) fs::remove_all(dir);
  else if (o.out.empty())
    std::printf("logs: %s (a temporary directory, kept: the failures' logs; remove it when done)\n", dir.c_str());
  return bad == 0 ? 0 : 1;
}

}  // namespace parity::cli
