// `parity run SCENARIO`: world 1 trains the scenario and prints each step's loss beside the
// data's entropy floor. World > 1 starts layout.world rank processes of this binary (the
// hidden --as-rank side), each running the baseline and the layout side by side; rank 0
// prints the verdict table (harness/verdict.h) and every rank exits with the verdict:
// 0 within tolerance, 1 not, 2 bad input (refused before any rank starts).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/self.h"
#include "comm/launch.h"
#include "comm/world.h"
#include "core/error.h"
#include "harness/baseline.h"
#include "harness/scenario.h"
#include "harness/verdict.h"
#include "mesh/mesh.h"

namespace parity::cli {

namespace {

struct RunOptions {
  std::string scenario;
  int64_t steps = -1;
  int64_t every = 1;
  std::string report, dtype, backend, log_dir, optim;
  double lr = -1;
  double timeout_s = 60;
  bool as_rank = false;
};

void print_header(const Scenario& s, double floor) {
  const auto& m = s.model;
  std::printf("scenario %s: %s, %s, %lld steps, world %lld\n", s.name.c_str(), std::string(dtype_name(m.dtype)).c_str(),
              std::string(optim_name(s.optim.kind)).c_str(), static_cast<long long>(s.steps),
              static_cast<long long>(s.layout.world));
  std::printf("entropy floor %.6f nats/token (ln V = %.6f)\n", floor, std::log(static_cast<double>(m.vocab)));
  std::printf("%6s %14s %14s %12s %12s %8s %12s\n", "step", "loss", "cross_entropy", "aux", "grad_norm", "clip",
              "above_floor");
}

template <class T> int run_baseline(const Scenario& s, const RunOptions& o) {
  BaselineRun<T> run(s);
  const double floor = run.data().entropy_floor();
  print_header(s, floor);
  for (int64_t t = 0; t < s.steps; ++t) {
    StepRecord<T> r = run.step(t);
    if (!std::isfinite(r.loss)) {
      std::fprintf(stderr, "parity run: loss is %f at step %lld\n", r.loss, static_cast<long long>(t));
      return 1;
    }
    if (t % o.every == 0 || t + 1 == s.steps)
      std::printf("%6lld %14.8f %14.8f %12.4e %12.4e %8.4f %12.6f\n", static_cast<long long>(t), r.loss, r.ce, r.aux,
                  r.grad_norm, r.clip_coef, r.ce - floor);
    std::fflush(stdout);
  }
  return 0;
}

// The scenario with the command line's overrides, checked again as a whole (ConfigError,
// exit 2, names the field and the rule).
Scenario load_with_overrides(const RunOptions& o) {
  Scenario s = load_scenario(o.scenario);
  if (o.steps >= 0) s.steps = o.steps;
  if (!o.dtype.empty()) {
    if (o.dtype != "fp32" && o.dtype != "fp64") throw ConfigError("--dtype", "must be fp32 or fp64, got " + o.dtype);
    s.model.dtype = parse_dtype(o.dtype);
  }
  if (!o.backend.empty()) s.layout.backend = o.backend;
  if (!o.optim.empty()) {
    if (o.optim == "sgd") s.optim.kind = OptimKind::sgd;
    else if (o.optim == "adam") s.optim.kind = OptimKind::adam;
    else if (o.optim == "adamw") s.optim.kind = OptimKind::adamw;
    else throw ConfigError("--optim", "must be sgd, adam or adamw, got " + o.optim);
  }
  if (o.lr >= 0) s.optim.lr = o.lr;
  try {
    validate_scenario(s);
    mesh::validate_layout(s.layout, s.model);
  } catch (const ConfigError& e) {
    throw ConfigError(o.scenario + ": " + e.path(), e.rule());
  }
  return s;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The launcher side: refuse bad input, start the ranks, report the wall time.
int launch_ranks(const Scenario& s, const RunOptions& o) {
  (void)fault_from_env();  // a malformed PARITY_FAULT is refused here, before any rank starts
  comm::LaunchOptions lo;
  lo.nproc = static_cast<int>(s.layout.world);
  lo.backend = comm::parse_backend(s.layout.backend);
  lo.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  lo.prefix_output = false;  // rank 0 alone prints; errors name their rank themselves
  lo.log_dir = o.log_dir;
  const int64_t t0 = now_ns();
  lo.extra_env.push_back("PARITY_LAUNCH_T0_NS=" + std::to_string(t0));
  std::vector<std::string> args{"run", o.scenario, "--as-rank", "--steps", std::to_string(s.steps),
                                "--dtype", std::string(dtype_name(s.model.dtype)), "--backend", s.layout.backend};
  if (!o.report.empty()) args.insert(args.end(), {"--report", o.report});
  if (!o.optim.empty()) args.insert(args.end(), {"--optim", o.optim});
  if (o.lr >= 0) args.insert(args.end(), {"--lr", std::to_string(o.lr)});
  std::fflush(stdout);
  const int rc = comm::launch_main(lo, self_command(args));
  std::printf("time to verdict: %.3f s (launcher wall clock, %d ranks, exit %d)\n",
              static_cast<double>(now_ns() - t0) * 1e-9, lo.nproc, rc);
  return rc;
}

void write_report(const std::string& path, const VerdictReport& rep) {
  std::ofstream f(path);
  if (!f) throw IoError("cannot write report file " + path);
  f << verdict_json(rep).dump(2) << "\n";
  if (!f) throw IoError("cannot write report file " + path);
}

// The rank side: join the world, run the verdict, rank 0 prints and writes the report.
int run_rank_verdict(const RunOptions& o) {
  const char* t0 = std::getenv("PARITY_LAUNCH_T0_NS");
  const double startup = t0 != nullptr ? static_cast<double>(now_ns() - std::atoll(t0)) * 1e-9 : 0.0;
  Scenario s = load_with_overrides(o);
  const auto r0 = std::chrono::steady_clock::now();
  auto world = comm::make_world_communicator();
  VerdictOptions vo;
  vo.rendezvous_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
  vo.startup_s = startup;
  vo.fault = fault_from_env();
  if (world->size() != s.layout.world)
    throw ConfigError("$.layout.world", "the scenario asks for " + std::to_string(s.layout.world) +
                                            " ranks but this run has " + std::to_string(world->size()));
  VerdictReport rep = s.model.dtype == DType::f32 ? run_verdict<float>(s, *world, vo) : run_verdict<double>(s, *world, vo);
  if (world->rank() == 0) {
    std::fputs(format_verdict(rep).c_str(), stdout);
    std::fflush(stdout);
    if (!o.report.empty()) write_report(o.report, rep);
  }
  return rep.exit_code();
}

// Errors of a rank carry its rank: the launcher prints every rank's lines unprefixed.
int run_rank(const RunOptions& o) {
  const char* r = std::getenv("RANK");
  if (r == nullptr) r = std::getenv("OMPI_COMM_WORLD_RANK");
  const std::string who = std::string("parity: rank ") + (r != nullptr ? r : "?") + ": error: ";
  try {
    return run_rank_verdict(o);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s%s\n", who.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s%s\n", who.c_str(), e.what());
    return 1;
  }
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "Train a scenario. World 1: print each step's loss beside the entropy floor. World > 1: start the\n"
      "layout's ranks, compare every step with the one-device baseline (loss, gradients and parameters\n"
      "per family, grad norm, clipping, routing, tokens_per_expert, expert bias) and print the verdict.\n"
      "Exit 0 within tolerance, 1 not, 2 bad input.");
  sub->add_option("scenario", o->scenario, "Scenario JSON file (docs/scenario.md)")->required();
  sub->add_option("--steps", o->steps, "Override the scenario's number of steps")->check(CLI::NonNegativeNumber);
  sub->add_option("--every", o->every, "World 1: print every K-th step (the last is always printed)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--dtype", o->dtype, "Override the scenario's dtype: fp32 or fp64");
  sub->add_option("--backend", o->backend, "Override the layout's backend: gloo, mpi or nccl");
  sub->add_option("--optim", o->optim, "Override the optimizer: sgd, adam or adamw");
  sub->add_option("--lr", o->lr, "Override the learning rate")->check(CLI::PositiveNumber);
  sub->add_option("--report", o->report, "World > 1: also write the verdict as JSON to FILE");
  sub->add_option("--timeout", o->timeout_s, "World > 1: per-collective timeout in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--log-dir", o->log_dir, "World > 1: also write each rank's output to DIR/rank<r>.log");
  sub->add_flag("--as-rank", o->as_rank, "(internal) run as one rank of the verdict")->group("");
  return {sub, [o]() {
            if (o->as_rank) return run_rank(*o);
            Scenario s = load_with_overrides(*o);
            if (s.layout.world > 1) return launch_ranks(s, *o);
            return s.model.dtype == DType::f32 ? run_baseline<float>(s, *o) : run_baseline<double>(s, *o);
          }};
}

}  // namespace parity::cli
