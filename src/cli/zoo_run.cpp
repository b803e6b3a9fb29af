// `parity zoo`, run (cli/zoo_run.h; its options: cli/zoo_cmd.cpp).
#include "cli/zoo_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/jobs.h"
#include "cli/run_context.h"
#include "cli/zoo_report.h"
#include "cli/zoo_shape.h"
#include "core/error.h"
#include "core/files.h"
#include "core/inject.h"
#include "core/precision.h"
#include "harness/runner/run_flow.h"
#include "harness/scenario/scenario.h"

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

// One run of the table: a bug in a scenario. Without --set, each bug in the registry's scenario;
// with it, each bug in each scenario of the set, where it may be unable to act (cli/zoo_shape.h).
struct Case {
  const Injection* bug = nullptr;
  std::string scenario;  // the file
  std::string label;     // its column of the table: the registry's name, or the file's name in the set
  std::string key;       // the report's and log's name: the bug, or "bug@scenario" over a set
  std::string root;      // the root the verdict must name (alternatives "A|B")
  std::string factor;    // what the root's factor must contain (alternatives "A|B")
  std::string cannot;    // "" the bug can act here; else why not (then run only under --check-cannot)
  bool run = true;
  int64_t step = 0;      // the step the root must name
};

std::string report_path(const Case& c, const std::string& dir) { return dir + "/" + c.key + ".report.json"; }

// The case's run: its scenario with the bug turned on, the report and the log in dir.
Job make_job(const Case& c, const ZooOptions& o, const std::string& dir) {
  const std::string name(c.bug->name);
  std::vector<std::string> args{"run", c.scenario, "--inject", name, "--report", report_path(c, dir)};
  if (!o.precision.empty()) args.insert(args.end(), {"--precision", o.precision});
  if (o.trajectory) args.push_back("--trajectory");
  if (!o.backend.empty()) args.insert(args.end(), {"--backend", o.backend});
  return {args, dir + "/" + c.key + ".log", "zoo: " + c.key};
}

// What the run's exit code and report say against what the registry expects.
Outcome judge(const Case& c, const JobEnd& end, const std::string& dir) {
  Outcome r;
  r.seconds = end.seconds, r.rc = end.rc;
  // The first root the run names: a resume check's phase 1 (its own report, run_flow.h
  // phase1_report) where that failed, else phase 2's (a bug of the checkpoint acts only there).
  for (const std::string& path : {phase1_report(report_path(c, dir)), report_path(c, dir)}) {
    std::string text;
    try {  // the bounded, regular-file reader (core/files.h); a report that is not one reads as none
      text = read_regular_if_exists(path, int64_t{64} << 20, Blame::damaged_data, "zoo report").value_or("");
    } catch (const Error&) {
    }
    const nlohmann::json rep = nlohmann::json::parse(text, nullptr, false);
    if (rep.is_object() && rep.contains("root") && rep["root"].is_object()) {
      r.root = root_text(rep["root"]);
      r.step = rep["root"].value("step", int64_t{-1});
      r.factor = rep["root"].value("factor", "");
      break;
    }
  }
  if (r.rc != 0 && r.rc != 1)
    r.verdict = "ERROR (exit " + std::to_string(r.rc) + ")";
  else if (!c.cannot.empty())  // a pair the shape table says the bug cannot act in: it must change nothing
    r.verdict = r.rc == 0 ? "no effect" : "ACTS";
  else if (r.rc == 0)
    r.verdict = "ESCAPED";
  else if (!any_of_alternatives(c.root, [&](std::string_view a) { return r.root == a; }) || r.step != c.step ||
           !any_of_alternatives(c.factor, [&](std::string_view a) { return r.factor.find(a) != std::string::npos; }))
    r.verdict = "MISNAMED";
  else
    r.verdict = "ok";
  return r;
}

bool passes(const std::string& verdict) {
  return verdict == "ok" || verdict == "no effect" || verdict == "cannot act";
}

// The case's row of the table, with what was expected and its log under a row that is not "ok".
void print_row(const Case& c, const Outcome& r, const std::string& dir) {
  const Injection& b = *c.bug;
  std::printf("%-28s %-46s %-10s ", std::string(b.name).c_str(), c.label.c_str(), r.verdict.c_str());
  if (!c.run) {
    std::printf("     -  in this shape: %s\n", c.cannot.c_str());
    std::fflush(stdout);
    return;
  }
  if (r.verdict == "no effect")
    std::printf("%5.2fs  passed: the bug changed nothing", r.seconds);
  else
    std::printf("%5.2fs  %s at step %lld: %s", r.seconds, r.root.empty() ? "-" : r.root.c_str(),
                static_cast<long long>(r.step), r.factor.c_str());
  if (!c.cannot.empty())
    std::printf("\n    the shape table says it cannot act here: %s%s", c.cannot.c_str(),
                r.verdict == "no effect" ? "" : ("; log " + dir + "/" + c.key + ".log").c_str());
  else if (r.verdict != "ok")
    std::printf("\n    expected %s at step %lld, factor containing \"%s\"; log %s/%s.log", c.root.c_str(),
                static_cast<long long>(c.step), c.factor.c_str(), dir.c_str(), c.key.c_str());
  std::printf("\n");
  std::fflush(stdout);
}

ZooResult result(const Case& c, const Outcome& r, const ZooOptions& o, const std::string& dir) {
  const Injection& b = *c.bug;
  const std::string expected = c.cannot.empty() ? c.root + " at step " + std::to_string(c.step) +
                                                      ", factor containing \"" + c.factor + "\""
                                                : "no effect (cannot act in this shape)";
  const std::string named = r.root.empty() ? "" : r.root + " at step " + std::to_string(r.step) + ": " + r.factor;
  ZooResult z{std::string(b.name), c.label, expected, named, r.verdict, "", r.seconds, c.cannot,
              o.set.empty() ? "" : c.key};
  if (c.run && (!o.out.empty() || !passes(r.verdict))) z.log = dir + "/" + c.key + ".log";  // else removed
  return z;
}

// The cases: each bug in its registry scenario, or (--set) in every scenario of the set.
std::vector<Case> make_cases(const std::vector<const Injection*>& bugs, const ZooOptions& o) {
  std::vector<Case> cases;
  if (o.set.empty()) {
    for (const Injection* b : bugs) {
      const std::string file = o.scenarios + "/" + std::string(b->scenario);
      if (!fs::exists(file))
        throw ConfigError("--scenarios", file + ": missing (run from the project root or name the scenario directory)");
      // fp16's scaler bugs under --precision of a policy without a scaler, fp8's without fp8, a 16-bit
      // compute copy's bug under fp32 / fp64: cannot act
      // (not run, passes); so does any bug whose scenario the policy refuses
      std::string cannot;
      if (!o.precision.empty()) {
        Scenario s = load_scenario(file);
        s.model.set_precision(parse_precision(o.precision, "--precision"));
        if (zoo_policy_bound(*b)) cannot = zoo_cannot_act(*b, s);
        try {
          if (cannot.empty()) (void)validate_scenario(s);
        } catch (const ConfigError& e) {
          cannot = "the layout is refused under --precision " + o.precision + " (" + e.what() + ")";
        }
      }
      cases.push_back({b, file, std::string(b->scenario), std::string(b->name), std::string(b->root),
                       std::string(b->factor), cannot, cannot.empty(), b->step});
    }
    return cases;
  }
  std::vector<std::pair<std::string, Scenario>> set;
  for (const std::string& f : scenario_files({o.set})) {
    Scenario s = load_scenario(f);
    if (!o.precision.empty()) s.model.set_precision(parse_precision(o.precision, "--precision"));
    set.emplace_back(f, std::move(s));
  }
  for (const Injection* b : bugs)
    for (const auto& [file, s] : set) {
      const std::string stem = fs::path(file).stem().string(), cannot = zoo_cannot_act(*b, s);
      cases.push_back({b, file, fs::path(file).filename().string(), std::string(b->name) + "@" + stem,
                       zoo_root_in(*b, s), zoo_factor_in(*b, s), cannot, cannot.empty() || o.check_cannot,
                       zoo_step_in(*b, s)});
    }
  return cases;
}

// Over a set: the bugs that can act in none of its scenarios (listed, never silently left out).
void print_unexercised(const std::vector<const Injection*>& bugs, const std::vector<Case>& cases) {
  std::string none;
  for (const Injection* b : bugs)
    if (std::none_of(cases.begin(), cases.end(), [&](const Case& c) { return c.bug == b && c.cannot.empty(); }))
      none += (none.empty() ? "" : ", ") + std::string(b->name);
  if (!none.empty()) std::printf("cannot act in any scenario of the set: %s\n", none.c_str());
}

// The last line: the zoo verdict (over a set, the pairs caught, those that cannot act, the bad ones).
void print_verdict(const ZooOptions& o, const std::vector<const Injection*>& bugs, const std::vector<Case>& cases,
                   const std::vector<Outcome>& outcomes) {
  size_t bad = 0, caught = 0, cannot = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    bad += !passes(outcomes[i].verdict);
    caught += outcomes[i].verdict == "ok";
    cannot += !cases[i].cannot.empty();
  }
  const char* verdict = bad == 0 ? "PASS" : "FAIL";
  if (o.set.empty()) {
    std::printf("\nzoo verdict: %s: %zu bugs, %zu caught with their root named, %zu escaped or misnamed\n", verdict,
                bugs.size(), caught, bad);
    return;
  }
  std::printf("\n");
  print_unexercised(bugs, cases);
  std::printf("zoo verdict over %s: %s: %zu pairs (%zu bugs x %zu scenarios): %zu caught with their root named, %zu "
              "cannot act in their shape%s, %zu escaped, misnamed, failed to run or acted where they cannot\n",
              o.set.c_str(), verdict, cases.size(), bugs.size(), cases.size() / bugs.size(), caught, cannot,
              o.check_cannot ? " (run, and each changed nothing)" : "", bad);
}

}  // namespace

int run_zoo(ZooOptions o) {
  std::vector<const Injection*> bugs;
  if (o.names.empty())
    for (const auto& i : injections()) bugs.push_back(&i);
  else
    for (const auto& n : o.names) bugs.push_back(&find_injection(n));
  if (o.check_cannot && o.set.empty())
    throw ConfigError("--check-cannot", "runs the pairs of a scenario set: give --set");
  const std::vector<Case> cases = make_cases(bugs, o);
  // What parity may write (docs/faults.md "Nothing lost"), checked before any bug runs.
  if (!o.out.empty()) check_output_dir("--out", o.out);
  if (!o.junit.empty()) check_output_file("--junit", o.junit, "<testsuite name=\"parity-zoo\"");
  if (o.jobs <= 0) o.jobs = cpu_jobs();
  DirLock lock;
  const std::string dir = jobs_dir(o.out, "zoo", lock);
  std::printf("%-28s %-46s %-10s %6s  %s\n", "bug", "scenario", "verdict", "time", "root named (expected)");
  std::vector<Job> jobs;
  std::vector<size_t> job_case;  // the case of each job
  for (size_t i = 0; i < cases.size(); ++i)
    if (cases[i].run) jobs.push_back(make_job(cases[i], o, dir)), job_case.push_back(i);
  // The rows in the cases' order whatever order the runs end in: each once those above it are printed.
  std::vector<Outcome> outcomes(cases.size());
  InOrder rows(cases.size(), [&](size_t i) { print_row(cases[i], outcomes[i], dir); });
  for (size_t i = 0; i < cases.size(); ++i)
    if (!cases[i].run) outcomes[i].verdict = "cannot act", rows.done(i);
  const auto t0 = std::chrono::steady_clock::now();
  run_jobs(jobs, o.jobs, start_self, [&](size_t j, const JobEnd& end) {
    outcomes[job_case[j]] = judge(cases[job_case[j]], end, dir);
    rows.done(job_case[j]);
  });
  int bad = 0;
  std::vector<ZooResult> results;
  for (size_t i = 0; i < cases.size(); ++i) {
    bad += !passes(outcomes[i].verdict);
    results.push_back(result(cases[i], outcomes[i], o, dir));
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
  print_verdict(o, bugs, cases, outcomes);
  if (bad == 0 && o.out.empty()) fs::remove_all(dir);
  else if (o.out.empty())
    std::printf("logs: %s (a temporary directory, kept: the failures' logs; remove it when done)\n", dir.c_str());
  return bad == 0 ? 0 : 1;
}

}  // namespace parity::cli
