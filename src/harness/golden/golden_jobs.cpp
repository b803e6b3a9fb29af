// `parity golden update|check` (golden.h, docs/golden.md): per scenario, the curves computed
// (the baseline here, the layout through the one launch) and written, or compared with the
// pinned file.
#include "harness/golden/golden_jobs.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "harness/golden/golden.h"
#include "harness/scenario/memory.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/tolerance.h"
#include "model/data.h"

namespace parity {

namespace {

namespace fs = std::filesystem;


// golden/<the scenario's file name>.json: two files with the same "name" never share a golden.
std::string golden_path(const GoldenOptions& o, const std::string& scenario_path, const std::string& name) {
  if (name.empty()) throw ConfigError(scenario_path, "a scenario file needs a name: it names the golden file");
  const fs::path dir = o.dir.empty() ? fs::path(scenario_path).parent_path() / ".." / "golden" : fs::path(o.dir);
  return (dir.lexically_normal() / (name + ".json")).string();
}

// The file's scenario (whose hash names the golden) and the one that runs: steps and backend
// overridden, checked again as a whole.
std::pair<Scenario, Scenario> load_pair(const std::string& path, const GoldenOptions& o) {
  Scenario file = load_scenario(path);
  Scenario run = file;
  run.steps = o.steps;
  if (!o.backend.empty()) run.layout.backend = comm::parse_backend(o.backend);
  if (!o.backend.empty() && run.resume) run.resume->layout.backend = run.layout.backend;
  try {
    validate_scenario(run);
  } catch (const ConfigError& e) {
    throw ConfigError(printable(path, 4096) + ": " + e.path(), e.rule());
  }
  require_ranks_per_host(run, 1, printable(path, 4096));   // exit 2 above the per-host cap
  require_memory(run, run.layout, printable(path, 4096));  // exit 77 before any rank starts
  if (run.resume && run.layout.world > 1) require_memory(run, run.resume->layout, printable(path, 4096));
  return {file, run};
}

std::string temp_file(const std::string& name) {
  sweep_stale_temp("parity-golden-");
  return (fs::temp_directory_path() / ("parity-golden-" + std::to_string(getpid()) + "-" + name + ".json")).string();
}

// Starts the layout's ranks (the one launch, job curves); rank 0 writes its curves, and every
// rank's CPU time and peak memory, to a temporary file read back here.
Curves run_layout(const Scenario& s, const GoldenOptions& o, Perf& perf, const CurvesCheckpoint& ck = {}) {
  RunRequest r;
  r.job = RankJob::curves;
  r.scenario = s;  // steps and backend resolved
  r.scenario->resume.reset();  // the curves are the scenario's own layout's (a request runs one layout)
  r.save_at = ck.save_at, r.ckpt = ck.ckpt_dir, r.resume = ck.resume_dir;
  r.out = temp_file(s.name);
  r.timeout_s = o.timeout_s;
  const int rc = launch(r, o.start);
  if (rc != 0) {
    fs::remove(r.out);
    throw Error(s.name + ": the layout's ranks failed (exit " + std::to_string(rc) + ")");
  }
  std::ifstream f(r.out);
  std::stringstream ss;
  ss << f.rdbuf();
  fs::remove(r.out);
  const nlohmann::json j = nlohmann::json::parse(ss.str());
  for (const auto& rank : j.at("ranks")) {
    perf.ranks_cpu_s += rank.at("cpu_s").get<double>();
    perf.peak_rss_mib.push_back(rank.at("peak_rss_mib").get<double>());
  }
  return curves_from_json(j.at("curves"), r.out, true);
}

// A fresh directory for a resume scenario's checkpoint, removed when the golden is made.
struct ResumeDir {
  std::string path;
  ResumeDir() {
    std::string t = (fs::temp_directory_path() / "parity-golden-resume-XXXXXX").string();
    if (mkdtemp(t.data()) == nullptr) throw IoError(t + ": cannot create a temporary directory");
    path = t;
  }
  ~ResumeDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The curves of the baseline (here) and the layout (its ranks), with what they cost: wall time
// from start to end, CPU time of this process's run and of every rank, each process's peak
// memory (this one's reset first, so that `update` of many scenarios in one process gives each
// its own). `update` and `check` measure the same work; update's twin runs afterwards.
Golden compute(const Scenario& file, const Scenario& run, const GoldenOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  reset_peak_rss();
  const ProcessUsage u0 = process_usage();
  Golden g;
  g.scenario = file.name;
  g.scenario_hash = scenario_hash(file);
  g.dtype = precision_name(run.model.precision());  // the policy: fp64, fp32, bf16, ...
  g.world = run.layout.world;
  g.layout = describe_layout(run.layout, LayoutText::full);
  g.entropy_floor = MarkovData(run.model.vocab, run.data_seed).entropy_floor();
  g.baseline = baseline_curves(run);
  Perf perf;
  perf.machine = machine_name();
  perf.cpu_s = process_usage().cpu_s - u0.cpu_s;  // the baseline's (the launches after it wait, not compute)
  if (run.layout.world > 1 && run.resume) {  // both phases: the layout saves on its way, the other resumes
    const ResumeDir tmp;
    const std::string dir = tmp.path + "/ckpt";
    g.backend = comm::backend_name(run.layout.backend);
    g.layout_curves = run_layout(run, o, perf, {run.resume->save_at, dir, ""});
    Scenario second = run;
    second.layout = run.resume->layout;
    g.resume_step = run.resume->save_at;
    g.resume_layout = describe_layout(second.layout, LayoutText::full);
    g.resumed = run_layout(second, o, perf, {-1, "", dir});
  } else if (run.layout.world > 1) {
    g.backend = comm::backend_name(run.layout.backend);
    g.layout_curves = run_layout(run, o, perf);
  }
  perf.wall_s = seconds_since(t0);
  perf.peak_rss_mib.insert(perf.peak_rss_mib.begin(), process_usage().peak_rss_mib);  // the command's, whole
  g.perf = perf;
  return g;
}

int update_one(const std::string& path, const GoldenOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto [file, run] = load_pair(path, o);
  // Before the run: a golden is replaced only by a golden (docs/faults.md "Nothing lost").
  check_output_file("golden update", golden_path(o, path, fs::path(path).stem().string()), kGoldenSignature);
  Golden g = compute(file, run, o);
  // The loss's measured bound for the plot: the baseline again with its rounding twin beside it
  // (not timed: the check does not run it). Its curves are the baseline's, bit for bit.
  if (baseline_curves(run, &g.loss_bound).loss != g.baseline.loss)
    throw Error(file.name + ": the baseline beside its twin computed another loss (a bug of the twin's run)");
  g.commit = current_commit(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string());
  const std::string out = golden_path(o, path, fs::path(path).stem().string());
  save_golden(out, g);
  std::printf("golden update %s: wrote %s (%lld steps, world %lld%s; pinned cpu %.2f s + ranks %.2f s, wall %.1f s, "
              "peak %.0f MiB), %.1f s\n",
              file.name.c_str(), out.c_str(), static_cast<long long>(run.steps), static_cast<long long>(g.world),
              g.world > 1 ? (", " + g.backend).c_str() : "", g.perf->cpu_s, g.perf->ranks_cpu_s, g.perf->wall_s,
              *std::max_element(g.perf->peak_rss_mib.begin(), g.perf->peak_rss_mib.end()), seconds_since(t0));
  return 0;
}

void print_diffs(const GoldenCheck& c, int max_lines) {
  for (const std::string& s : c.structural) std::printf("  differs: %s\n", s.c_str());
  int shown = 0;
  for (const CurveDiff& d : c.diffs) {
    if (shown++ == max_lines) {
      std::printf("  ... and %zu more\n", c.diffs.size() - static_cast<size_t>(max_lines));
      break;
    }
    if (d.tol == 0)
      std::printf("  %-8s %-26s step %3lld: got %s, golden %s (exact)\n", d.run.c_str(), d.metric.c_str(),
                  static_cast<long long>(d.step), d.got.c_str(), d.want.c_str());
    else
      std::printf("  %-8s %-26s step %3lld: got %s, golden %s, rel %.2e > tol %.0e\n", d.run.c_str(),
                  d.metric.c_str(), static_cast<long long>(d.step), d.got.c_str(), d.want.c_str(), d.rel, d.tol);
  }
}

int check_one(const std::string& path, const GoldenOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto [file, run] = load_pair(path, o);
  const std::string gpath = golden_path(o, path, fs::path(path).stem().string());
  const std::string regen = "regenerate it after an intended change with: parity golden update " + path;
  if (!fs::exists(gpath)) {
    std::printf("golden check %s: FAIL: no golden file %s; %s\n", file.name.c_str(), gpath.c_str(), regen.c_str());
    return 1;
  }
  const Golden want = load_golden(gpath);
  if (want.scenario_hash != scenario_hash(file)) {
    std::printf("golden check %s: FAIL: %s was made from another version of the scenario (hash %s, the file now "
                "hashes to %s); %s\n",
                file.name.c_str(), gpath.c_str(), want.scenario_hash.c_str(), scenario_hash(file).c_str(),
                regen.c_str());
    return 1;
  }
  if (static_cast<int64_t>(want.baseline.steps()) != run.steps) run.steps = static_cast<int64_t>(want.baseline.steps());
  const Golden got = compute(file, run, o);
  const GoldenCheck c = compare_golden(want, got);
  const PerfCheck pc = compare_perf(want.perf, *got.perf, o.perf);
  if (!o.perf_out.empty()) {  // a new file in the parent's own directory: never over one that exists
    if (fs::exists(fs::symlink_status(o.perf_out))) throw ConfigError("--perf-out", o.perf_out + " exists");
    std::ofstream f(o.perf_out, std::ios::trunc);
    f << perf_share_json(perf_share(want.perf, *got.perf, pc)) << "\n";
    if (!f.flush()) throw Error("golden check: cannot write " + o.perf_out);
  }
  const bool passed = c.passed() && pc.state != PerfCheck::State::fail;
  std::printf(
      "golden check %s: %s: %zu of %lld values differ (largest rel %.1e, tol %.0e; %lld steps, world %lld%s, "
      "golden from %.12s), %.1f s\n",
      file.name.c_str(), passed ? "PASS" : "FAIL", c.diffs.size() + c.structural.size(),
      static_cast<long long>(c.compared), c.max_rel,
      tolerance_for(run.model.precision(), Quantity::golden_curve).norm_rel, static_cast<long long>(run.steps),
      static_cast<long long>(run.layout.world),
      run.layout.world > 1 ? (", " + std::string(comm::backend_name(run.layout.backend))).c_str() : "",
      want.commit.c_str(), seconds_since(t0));
  std::printf("  %s\n", pc.summary.c_str());
  if (got.resumed && !want.resumed)
    std::printf("  resumed phase not pinned (this golden records the first layout only; `golden update` pins both)\n");
  for (const std::string& f : pc.fails) std::printf("  perf over its band: %s\n", f.c_str());
  if (!c.passed()) print_diffs(c, o.max_lines);
  if (!passed)
    std::printf("  (%s%s)\n", regen.c_str(),
                c.passed() ? "; on another machine, or to skip time and memory: --no-perf" : "");
  return passed ? 0 : 1;
}

// Every scenario in turn; the exit code is the worst (2 bad input > 1 failed > 0).
int for_each_golden(const GoldenOptions& o, int (*one)(const std::string&, const GoldenOptions&)) {
  int worst = 0;
  for (const std::string& p : o.scenarios) {
    int rc = 0;
    try {
      rc = one(p, o);
    } catch (const ConfigError& e) {
      std::fprintf(stderr, "parity golden: %s\n", e.what());
      rc = 2;
    } catch (const std::exception& e) {
      std::printf("golden %s: FAIL: %s\n", p.c_str(), e.what());
      rc = 1;
    }
    std::fflush(stdout);
    worst = std::max(worst, rc);
  }
  return worst;
}


}  // namespace

int golden_update(const GoldenOptions& o) { return for_each_golden(o, update_one); }
int golden_check(const GoldenOptions& o) { return for_each_golden(o, check_one); }

}  // namespace parity
