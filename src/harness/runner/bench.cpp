#include "harness/runner/bench.h"

#include <algorithm>
#include <chrono>
#include <immintrin.h>

#include "core/clock.h"
#include "core/philox.h"
#include "harness/runner/baseline.h"
#include "ops/matmul.h"

namespace parity {

namespace {

using Clock = std::chrono::steady_clock;

// 12 independent 4-wide FMA chains: enough to cover FMA latency x throughput.
__attribute__((target("avx2,fma"))) double fma_peak_avx2(int64_t iters, double& sink) {
  __m256d acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_pd(1.0 + i * 1e-3);
  const __m256d a = _mm256_set1_pd(0.999999), b = _mm256_set1_pd(1e-7);
  auto t0 = Clock::now();
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_pd(acc[i], a, b);
  double sec = seconds_since(t0);
  double out[4];
  __m256d s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_pd(s, acc[i]);
  _mm256_storeu_pd(out, s);
  sink = out[0] + out[1] + out[2] + out[3];
  return static_cast<double>(iters) * 12 * 4 * 2 / sec / 1e9;
}

template <class T> Buffer<T> random_buffer(int64_t n, uint64_t seed) {
  Buffer<T> v = zeros<T>(n);  // managed memory on cuda: the kernels time without staging
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<T>(philox_normal(seed, "bench", static_cast<uint64_t>(i)));
  return v;
}

template <class T>
MatmulTiming time_one(const std::string& what, int64_t n, int64_t k, int64_t m, int reps, bool backward) {
  auto x = random_buffer<T>(n * k, 1), w = random_buffer<T>(k * m, 2), y = random_buffer<T>(n * m, 3);
  Buffer<T> dx = zeros<T>(n * k), dw = zeros<T>(k * m);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    if (backward)
      matmul_backward(x.data(), w.data(), y.data(), dx.data(), dw.data(), n, k, m);
    else
      matmul_forward(x.data(), w.data(), y.data(), n, k, m);
    best = std::min(best, seconds_since(t0));
  }
  const double flops = 2.0 * static_cast<double>(n * k * m) * (backward ? 2 : 1);
  return {what, n, k, m, best, flops / best / 1e9};
}

}  // namespace

double measure_fp64_peak_gflops() {
  double sink = 0, best = 0;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    for (int r = 0; r < 5; ++r) best = std::max(best, fma_peak_avx2(20'000'000, sink));
  return sink == 12345.0 ? 0 : best;  // sink keeps the loop alive
}

template <class T> StepTiming time_baseline_steps(const Scenario& s, int64_t steps) {
  BaselineRun<T> run(s);
  run.step(0);  // warm-up
  std::vector<double> times;
  for (int64_t t = 1; t <= steps; ++t) {
    auto t0 = Clock::now();
    run.step(t);
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  return {steps, times.front(), median, static_cast<double>(s.model.batch * s.model.seq) / median};
}

template <class T> std::vector<MatmulTiming> time_matmuls(const ModelConfig& c, int reps) {
  const int64_t n = c.micro_batch() * c.seq, D = c.dim;
  std::vector<MatmulTiming> out;
  out.push_back(time_one<T>("attention projection, forward", n, D, D, reps, false));
  out.push_back(time_one<T>("attention projection, backward", n, D, D, reps, true));
  out.push_back(time_one<T>("dense MLP w1, forward", n, D, c.mlp_hidden, reps, false));
  out.push_back(time_one<T>("dense MLP w1, backward", n, D, c.mlp_hidden, reps, true));
  out.push_back(time_one<T>("LM head, forward", n, D, c.vocab, reps, false));
  out.push_back(time_one<T>("LM head, backward", n, D, c.vocab, reps, true));
  return out;
}

double step_matmul_flops(const ModelConfig& c) {
  // multiply-adds per token of every matmul of the model (MODEL.md), forward
  double macs = 0;
  for (int64_t l = 0; l < c.layers; ++l) {
    macs += 4.0 * static_cast<double>(c.dim * c.dim);  // wq, wk, wv, wo
    if (c.is_moe(l)) {
      macs += static_cast<double>(c.dim * c.experts);                                  // router
      macs += 3.0 * static_cast<double>(c.top_k * c.dim * c.expert_hidden);            // routed experts
      if (c.shared_experts > 0) macs += 3.0 * static_cast<double>(c.dim * c.shared_hidden);
    } else {
      macs += 3.0 * static_cast<double>(c.dim * c.mlp_hidden);
    }
  }
  macs += static_cast<double>(c.dim * c.vocab);  // head
  const double attn = 2.0 * static_cast<double>(c.seq * c.dim) / 2;  // q·k and p·v, causal half, per token
  // forward 2 flops per multiply-add, backward twice the forward (dx and dw)
  return 6.0 * static_cast<double>(c.batch * c.seq) * (macs + attn);
}

template StepTiming time_baseline_steps<float>(const Scenario&, int64_t);
template StepTiming time_baseline_steps<double>(const Scenario&, int64_t);
template std::vector<MatmulTiming> time_matmuls<float>(const ModelConfig&, int);
template std::vector<MatmulTiming> time_matmuls<double>(const ModelConfig&, int);

}  // namespace parity
