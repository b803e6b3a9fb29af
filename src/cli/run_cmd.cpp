// `parity run SCENARIO`: trains the scenario and prints each step's loss beside the
// data's entropy floor.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "harness/baseline.h"
#include "harness/scenario.h"

namespace parity::cli {

namespace {

struct RunOptions {
  std::string scenario;
  int64_t steps = -1;
  int64_t every = 1;
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

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Train a scenario and print each step's loss beside the entropy floor");
  sub->add_option("scenario", o->scenario, "Scenario JSON file (docs/scenario.md)")->required();
  sub->add_option("--steps", o->steps, "Override the scenario's number of steps")->check(CLI::NonNegativeNumber);
  sub->add_option("--every", o->every, "Print every K-th step (the last is always printed)")
      ->check(CLI::PositiveNumber);
  return {sub, [o]() {
    Scenario s = load_scenario(o->scenario);
    if (o->steps >= 0) s.steps = o->steps;
    return s.model.dtype == DType::f32 ? run_baseline<float>(s, *o) : run_baseline<double>(s, *o);
  }};
}

}  // namespace parity::cli
