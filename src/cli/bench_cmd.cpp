// `parity bench model SCENARIO`: the baseline's time per step and the reference matmul's
// GFLOP/s on the scenario's shapes, beside this core's measured fp64 FMA peak.
// `parity bench comm -n N`: nccl-tests columns for every collective across N ranks.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/self.h"
#include "comm/bench.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/precision.h"
#include "harness/runner/bench.h"
#include "harness/runner/launch_run.h"
#include "harness/runner/run_request.h"
#include "harness/scenario/scenario.h"

namespace parity::cli {

namespace {

struct BenchOptions {
  std::string scenario;
  int64_t steps = 5;
  int reps = 5;
  std::string device;
  std::string precision;  // "" keeps the scenario's policy
};

struct CommBenchCli {
  proc::LaunchOptions launch;  // -n, --log-dir (add_launch_options)
  RunRequest request;
  double timeout_s = 60;
};

// The ranks through the one launch (harness/runner/launch_run.h), job comm_bench.
int comm_bench_launch(CommBenchCli& o) {
  RunRequest r = o.request;
  r.job = RankJob::comm_bench;
  r.bench_world = o.launch.nproc, r.timeout_s = o.timeout_s, r.log_dir = o.launch.log_dir;
  r.bench.dtype = parse_dtype(r.bench_dtype);
  return launch(r, rank_start());
}

CLI::App* add_comm_bench(CLI::App& bench, std::shared_ptr<CommBenchCli> o) {
  CLI::App* sub = bench.add_subcommand(
      "comm", "nccl-tests columns (size, count, type, redop, time, algbw, busbw, #wrong) for every collective\n"
              "across N ranks, with a one-process memcpy as the ceiling of loopback transports");
  RunRequest& r = o->request;
  add_launch_options(*sub, o->launch, r.bench_backend, o->timeout_s);
  sub->add_option("-b,--min-bytes", r.bench.min_bytes, "Smallest message")->capture_default_str();
  sub->add_option("-e,--max-bytes", r.bench.max_bytes, "Largest message")->capture_default_str();
  sub->add_option("-f,--factor", r.bench.factor, "Size multiplier between rows")->capture_default_str();
  sub->add_option("--dtype", r.bench_dtype, "fp32, fp64 or int64")
      ->check(CLI::IsMember({"fp32", "fp64", "int64"}))
      ->capture_default_str();
  sub->add_option("--ops", r.bench.ops, "Collectives to time")->expected(1, -1);
  sub->add_flag("--json", r.bench.json, "One JSON object per row");
  return sub;
}

template <class T> int model_bench(const Scenario& s, const BenchOptions& o) {
  const Device dev = o.device.empty() ? s.layout.device : parse_device(o.device);
  require_device(dev, "bench model --device cuda");
  use_device(dev);
  const double peak = dev == Device::cpu ? measure_fp64_peak_gflops() : 0.0;
  std::printf("scenario %s (%s), %s\n", s.name.c_str(), precision_name(s.model.precision()).c_str(),
              dev == Device::cpu ? "one thread" : "on the GPU (kernels/, cuBLAS pedantic math)");
  if (dev == Device::cpu) std::printf("fp64 peak of one core (AVX2 FMA, measured): %.1f GFLOP/s\n", peak);
  std::printf("\n");
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
  const double flops = step_matmul_flops(s.model);
  std::printf("matmul + attention work per step: %.3f GFLOP; achieved %.2f GFLOP/s at the median step\n",
              flops * 1e-9, flops / st.median_seconds * 1e-9);
  if (dev == Device::cuda) {
    const BufferStats b = buffer_stats();
    std::printf("device memory (managed pool): %.1f MiB held, %.1f MiB peak in use; %lld cudaMallocManaged "
                "(%.3f s), %lld zero-fills (%.3f s)\n",
                b.pool_bytes / 1048576.0, b.peak_live_bytes / 1048576.0, static_cast<long long>(b.managed_allocs),
                b.managed_alloc_s, static_cast<long long>(b.zero_fills), b.zero_fill_s);
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto c = std::make_shared<CommBenchCli>();
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: `bench model SCENARIO`, `bench comm -n N`");
  bench->require_subcommand(1);
  CLI::App* comm_sub = add_comm_bench(*bench, c);
  CLI::App* sub = bench->add_subcommand(
      "model", "Time the one-device baseline: matmul GFLOP/s on the scenario's shapes against this core's fp64\n"
               "peak, and the time per training step");
  sub->add_option("scenario", o->scenario, "Scenario JSON file (e.g. scenarios/small.json)")->required();
  sub->add_option("--steps", o->steps, "Training steps to time (after one warm-up step)")->check(positive_integer());
  sub->add_option("--reps", o->reps, "Repetitions per matmul (the best is reported)")->check(positive_integer());
  sub->add_option("--device", o->device, "cpu or cuda (default: the scenario's layout.device); exit 77 without a GPU")
      ->check(device_choice());
  sub->add_option("--precision", o->precision,
                  "Time the step in this precision policy: fp64, fp32, bf16, bf16-reduce-bf16, fp16, fp8 or "
                  "fp8-delayed (default: the scenario's; docs/precision.md)");
  return {bench, [o, c, comm_sub]() {
            if (comm_sub->parsed()) return comm_bench_launch(*c);
            Overrides over;
            over.precision = o->precision;
            const Scenario s = resolve_scenario(o->scenario, over);
            return with_real(s.model.dtype, [&](auto x) { return model_bench<decltype(x)>(s, *o); });
          }};
}

}  // namespace parity::cli
