// `parity bench SCENARIO`: the baseline's time per step and the reference matmul's GFLOP/s
// on the scenario's shapes, beside this core's measured fp64 FMA peak.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "harness/bench.h"
#include "harness/scenario.h"

namespace parity::cli {

namespace {

struct BenchOptions {
  std::string scenario;
  int64_t steps = 5;
  int reps = 5;
};

template <class T> int bench(const Scenario& s, const BenchOptions& o) {
  const double peak = measure_fp64_peak_gflops();
  std::printf("scenario %s (%s), one thread\n", s.name.c_str(), std::string(dtype_name(s.model.dtype)).c_str());
  std::printf("fp64 peak of one core (AVX2 FMA, measured): %.1f GFLOP/s\n\n", peak);
  std::printf("%-34s %6s %6s %6s %11s %9s %8s\n", "matmul", "n", "k", "m", "time_us", "GFLOP/s", "of_peak");
  for (const MatmulTiming& m : time_matmuls<T>(s.model, o.reps))
    std::printf("%-34s %6lld %6lld %6lld %11.1f %9.2f %7.1f%%\n", m.what.c_str(), static_cast<long long>(m.n),
                static_cast<long long>(m.k), static_cast<long long>(m.m), m.seconds * 1e6, m.gflops,
                peak > 0 ? 100 * m.gflops / peak : 0.0);
  StepTiming st = time_baseline_steps<T>(s, o.steps);
  std::printf("\ntraining step (B %lld, S %lld, M %lld): median %.3f ms, best %.3f ms over %lld steps, %.0f tokens/s\n",
              static_cast<long long>(s.model.batch), static_cast<long long>(s.model.seq),
              static_cast<long long>(s.model.microbatches), st.median_seconds * 1e3, st.best_seconds * 1e3,
              static_cast<long long>(st.steps), st.tokens_per_second);
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Time the one-device baseline: matmul GFLOP/s on the scenario's shapes against this core's fp64\n"
               "peak, and the time per training step");
  sub->add_option("scenario", o->scenario, "Scenario JSON file (e.g. scenarios/small.json)")->required();
  sub->add_option("--steps", o->steps, "Training steps to time (after one warm-up step)")->check(CLI::PositiveNumber);
  sub->add_option("--reps", o->reps, "Repetitions per matmul (the best is reported)")->check(CLI::PositiveNumber);
  return {sub, [o]() {
            Scenario s = load_scenario(o->scenario);
            return s.model.dtype == DType::f32 ? bench<float>(s, *o) : bench<double>(s, *o);
          }};
}

}  // namespace parity::cli
