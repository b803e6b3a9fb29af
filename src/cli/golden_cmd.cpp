// `parity golden update|check SCENARIO...` (harness/golden/golden.h): pin a scenario's curves in
// golden/<name>.json, or rerun it and compare with the pinned curves. The baseline runs in
// this process; for layout.world > 1 the layout's ranks are started like `parity run` does
// (the hidden `golden rank` side) and rank 0 hands its curves back through a file.
// Exit: 0 every scenario matches (or was written), 1 a golden differs, is missing or stale,
// 2 bad input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/resolved.h"
#include "cli/self.h"
#include "comm/launch.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "harness/golden/golden.h"
#include "harness/scenario/memory.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/tolerance.h"
#include "mesh/mesh.h"
#include "model/data.h"

namespace parity::cli {

namespace {

namespace fs = std::filesystem;

struct GoldenOptions {
  std::vector<std::string> scenarios;
  std::string dir;      // where golden files live ("" = <scenario dir>/../golden)
  std::string backend;  // override of layout.backend
  int64_t steps = kGoldenSteps;
  double timeout_s = 120;
  int max_lines = 20;
  std::string out;  // rank side: where rank 0 writes its curves
};

std::string golden_path(const GoldenOptions& o, const std::string& scenario_path, const std::string& name) {
  if (name.empty()) throw ConfigError("$.name", "must not be empty: it names the golden file (golden/NAME.json)");
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
  try {
    validate_scenario(run);
  } catch (const ConfigError& e) {
    throw ConfigError(printable(path, 4096) + ": " + e.path(), e.rule());
  }
  require_ranks_per_host(run, 1, printable(path, 4096));   // exit 2 above the per-host cap
  require_memory(run, run.layout, printable(path, 4096));  // exit 77 before any rank starts
  return {file, run};
}

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("parity-golden-" + std::to_string(getpid()) + "-" + name + ".json")).string();
}

// Starts the layout's ranks; rank 0 writes its curves to a temporary file read back here.
Curves run_layout(const Scenario& s, const GoldenOptions& o) {
  comm::LaunchOptions lo;
  lo.nproc = static_cast<int>(s.layout.world);
  lo.backend = s.layout.backend;
  lo.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  lo.prefix_output = false;
  const std::string out = temp_file(s.name);
  const ResolvedScenario file(s);  // the run's scenario, steps and backend resolved (cli/resolved.h)
  std::vector<std::string> args{"golden", "rank", file.path(), "--out", out};
  std::fflush(stdout);
  const int rc = comm::launch_main(lo, self_command(args));
  if (rc != 0) {
    fs::remove(out);
    throw Error(s.name + ": the layout's ranks failed (exit " + std::to_string(rc) + ")");
  }
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  fs::remove(out);
  return curves_from_json(nlohmann::json::parse(ss.str()), out);
}

Golden compute(const Scenario& file, const Scenario& run, const GoldenOptions& o) {
  Golden g;
  g.scenario = file.name;
  g.scenario_hash = scenario_hash(file);
  g.dtype = precision_name(run.model.precision());  // the policy: fp64, fp32, bf16, ...
  g.world = run.layout.world;
  g.layout = describe_layout(run.layout, LayoutText::full);
  g.entropy_floor = MarkovData(run.model.vocab, run.data_seed).entropy_floor();
  g.baseline = baseline_curves(run);
  if (run.layout.world > 1) {
    g.backend = comm::backend_name(run.layout.backend);
    g.layout_curves = run_layout(run, o);
  }
  return g;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int update_one(const std::string& path, const GoldenOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto [file, run] = load_pair(path, o);
  // Before the run: a golden is replaced only by a golden (docs/faults.md "Nothing lost").
  check_output_file("golden update", golden_path(o, path, file.name), kGoldenSignature);
  Golden g = compute(file, run, o);
  g.commit = current_commit(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string());
  const std::string out = golden_path(o, path, file.name);
  save_golden(out, g);
  std::printf("golden update %s: wrote %s (%lld steps, world %lld%s), %.1f s\n", file.name.c_str(), out.c_str(),
              static_cast<long long>(run.steps), static_cast<long long>(g.world),
              g.world > 1 ? (", " + g.backend).c_str() : "", seconds_since(t0));
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
  const std::string gpath = golden_path(o, path, file.name);
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
  const GoldenCheck c = compare_golden(want, compute(file, run, o));
  std::printf(
      "golden check %s: %s: %zu of %lld values differ (largest rel %.1e, tol %.0e; %lld steps, world %lld%s, "
      "golden from %.12s), %.1f s\n",
      file.name.c_str(), c.passed() ? "PASS" : "FAIL", c.diffs.size() + c.structural.size(),
      static_cast<long long>(c.compared), c.max_rel,
      tolerance_for(run.model.precision(), Quantity::golden_curve).norm_rel, static_cast<long long>(run.steps),
      static_cast<long long>(run.layout.world),
      run.layout.world > 1 ? (", " + std::string(comm::backend_name(run.layout.backend))).c_str() : "",
      want.commit.c_str(), seconds_since(t0));
  if (!c.passed()) {
    print_diffs(c, o.max_lines);
    std::printf("  (%s)\n", regen.c_str());
  }
  return c.passed() ? 0 : 1;
}

// Every scenario in turn; the exit code is the worst (2 bad input > 1 failed > 0).
int for_each(const GoldenOptions& o, int (*one)(const std::string&, const GoldenOptions&)) {
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

// The rank side: the layout's curves; rank 0 writes them.
int run_rank(const GoldenOptions& o) {
  const Scenario run = load_scenario(o.scenarios.at(0));  // resolved by the launcher
  auto world = comm::make_world_communicator();
  const Curves c = layout_curves(run, *world);
  if (world->rank() == 0) {
    std::ofstream f(o.out);
    f << curves_to_json(c).dump() << "\n";
    if (!f.flush()) throw IoError("cannot write " + o.out);
  }
  return 0;
}

void add_common(CLI::App* sub, GoldenOptions& o) {
  sub->add_option("scenarios", o.scenarios, "Scenario JSON files")->required();
  sub->add_option("--backend", o.backend, "Override the layout's backend (gloo, mpi, nccl) for the run")
      ->check(backend_choice());
  sub->add_option("--golden-dir", o.dir, "Golden files' directory (default: ../golden next to the scenario)");
  sub->add_option("--timeout", o.timeout_s, "Per-collective timeout in seconds")->capture_default_str();
}

}  // namespace

Command add_golden_command(CLI::App& app) {
  auto o = std::make_shared<GoldenOptions>();
  CLI::App* sub = app.add_subcommand("golden",
                                     "Golden curves (docs/golden.md): per step loss, grad_norm, aux loss and\n"
                                     "tokens_per_expert of the baseline and the layout, pinned in golden/<name>.json.");
  sub->require_subcommand(1);
  CLI::App* up = sub->add_subcommand("update", "Run each scenario (50 steps) and write its golden file");
  add_common(up, *o);
  up->add_option("--steps", o->steps, "Steps to pin")->capture_default_str()->check(positive_integer());
  CLI::App* check = sub->add_subcommand(
      "check", "Rerun each scenario and compare with its golden file; print the steps that differ; exit 1 if any");
  add_common(check, *o);
  check->add_option("--max-lines", o->max_lines, "Differing values to print per scenario")->capture_default_str();
  CLI::App* rank = sub->add_subcommand("rank", "(internal) one rank of a golden run")->group("");
  add_common(rank, *o);
  rank->add_option("--out", o->out, "Rank 0 writes the curves here")->required();
  return {sub, [o, up, check]() {
            if (up->parsed()) return for_each(*o, update_one);
            if (check->parsed()) return for_each(*o, check_one);
            return run_rank(*o);
          }};
}

}  // namespace parity::cli
