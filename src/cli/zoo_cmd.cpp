// `parity zoo [NAMES]`: every named bug of core/inject.h turned on, one at a time, in the
// scenario that must catch it; the verdict must fail and its root line must name the
// expected quantity, step and factor. One table, exit 1 if a bug escapes or is misnamed.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/self.h"
#include "cli/zoo_report.h"
#include "core/error.h"
#include "core/files.h"
#include "core/inject.h"
#include "core/precision.h"

namespace parity::cli {

namespace {

namespace fs = std::filesystem;

struct ZooOptions {
  std::vector<std::string> names;  // default: every injection
  std::string scenarios = "scenarios";
  std::string out;  // keep reports and logs here
  std::string junit;  // JUnit XML, one testcase per bug
  std::string precision;  // every bug's run in this precision policy ("": each scenario's own)
};

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

Outcome run_one(const Injection& bug, const ZooOptions& o, const std::string& dir) {
  Outcome r;
  const std::string name(bug.name), scenario = o.scenarios + "/" + std::string(bug.scenario);
  const std::string report = dir + "/" + name + ".report.json", log = dir + "/" + name + ".log";
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> args{"run", scenario, "--inject", name, "--report", report};
  if (!o.precision.empty()) args.insert(args.end(), {"--precision", o.precision});
  const pid_t pid = spawn_self(args, log, "zoo: " + name);
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  std::ifstream f(report);
  const nlohmann::json rep = nlohmann::json::parse(f, nullptr, false);
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

int run_zoo(const ZooOptions& o) {
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
  std::string dir = o.out;
  if (dir.empty()) {
    std::string t = (fs::temp_directory_path() / "parity-zoo-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw IoError("zoo: cannot create a temporary directory");
    dir = t;
  }
  if (!o.out.empty()) prepare_output_dir("--out", dir);
  std::printf("%-28s %-46s %-10s %6s  %s\n", "bug", "scenario", "verdict", "time", "root named (expected)");
  int bad = 0;
  std::vector<ZooResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  for (const Injection* b : bugs) {
    const Outcome r = run_one(*b, o, dir);
    bad += r.verdict != "ok";
    const std::string expected = std::string(b->root) + " at step " + std::to_string(b->step) +
                                 ", factor containing \"" + std::string(b->factor) + "\"";
    const std::string named = r.root.empty() ? "" : r.root + " at step " + std::to_string(r.step) + ": " + r.factor;
    const bool kept = !o.out.empty() || r.verdict != "ok";  // the directory is removed when every bug is caught
    results.push_back({std::string(b->name), std::string(b->scenario), expected, named, r.verdict,
                       kept ? dir + "/" + std::string(b->name) + ".log" : "", r.seconds});
    std::printf("%-28s %-46s %-10s %5.2fs  %s at step %lld: %s", std::string(b->name).c_str(),
                std::string(b->scenario).c_str(), r.verdict.c_str(), r.seconds,
                r.root.empty() ? "-" : r.root.c_str(), static_cast<long long>(r.step), r.factor.c_str());
    if (r.verdict != "ok")
      std::printf("\n    expected %s at step %lld, factor containing \"%s\"; log %s/%s.log",
                  std::string(b->root).c_str(), static_cast<long long>(b->step), std::string(b->factor).c_str(),
                  dir.c_str(), std::string(b->name).c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  if (!o.junit.empty()) {
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ofstream f(o.junit);
    f << zoo_junit_xml(results, wall);
    if (!f) throw IoError("zoo: cannot write " + o.junit);
    std::printf("junit: %s\n", o.junit.c_str());
  }
  std::printf("\nzoo verdict: %s: %zu bugs, %zu caught with their root named, %d escaped or misnamed\n",
              bad == 0 ? "PASS" : "FAIL", bugs.size(), bugs.size() - static_cast<size_t>(bad), bad);
  if (bad == 0 && o.out.empty()) fs::remove_all(dir);
  return bad == 0 ? 0 : 1;
}

}  // namespace

Command add_zoo_command(CLI::App& app) {
  auto o = std::make_shared<ZooOptions>();
  CLI::App* sub = app.add_subcommand(
      "zoo",
      "Turn on each named bug of the parallel code (docs/zoo.md) in the scenario that must catch it, and check\n"
      "that the verdict fails and its root line names the expected quantity, step and factor. Exit 0 when\n"
      "every bug is caught and named, 1 when one escapes or is misnamed, 2 bad input");
  sub->add_option("names", o->names, "Bugs to run (default: all)");
  sub->add_option("--scenarios", o->scenarios, "Directory of the scenarios the bugs name (default: scenarios)");
  sub->add_option("--out", o->out, "Keep every report and log in DIR (default: a temporary directory)");
  sub->add_option("--precision", o->precision,
                  "Run every bug in this precision policy (fp64, fp32, bf16, bf16-reduce-bf16) instead of its "
                  "scenario's own")
      ->check([](const std::string& v) {
        try {
          (void)parse_precision(v, "--precision");
          return std::string();
        } catch (const ConfigError& e) {
          return e.rule();
        }
      });
  sub->add_option("--junit", o->junit,
                  "Write JUnit XML to FILE: a testcase per bug (classname zoo), a failure when it escaped, was "
                  "misnamed or its run did not finish, with what was expected and what the verdict named");
  return {sub, [o]() { return run_zoo(*o); }};
}

}  // namespace parity::cli
