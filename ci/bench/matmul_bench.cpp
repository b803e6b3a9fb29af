// Throughput of the CPU reference matmul (src/ops/matmul.h), forward and backward.
// Run: parity_bench --benchmark_filter=Matmul  (GFLOP/s column = 2*n*k*m flops per product)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "ops/matmul.h"

namespace {

template <class T>
std::vector<T> filled(int64_t size, uint64_t seed) {
  std::vector<T> v(static_cast<size_t>(size));
  uint64_t s = seed;
  for (T& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<T>(static_cast<double>(s >> 11) * 0x1.0p-53 - 0.5);
  }
  return v;
}

void set_counters(benchmark::State& state, int64_t n, int64_t k, int64_t m, double products) {
  state.counters["GFLOP/s"] = benchmark::Counter(products * 2.0 * static_cast<double>(n * k * m) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(n) + "x" + std::to_string(k) + " * " + std::to_string(k) + "x" +
                 std::to_string(m));
}

// y (n, m) = x (n, k) · w (k, m).
template <class T>
void BM_MatmulForward(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const std::vector<T> x = filled<T>(n * k, 1), w = filled<T>(k * m, 2);
  std::vector<T> y(static_cast<size_t>(n * m));
  for (auto _ : state) {
    parity::matmul_forward(x.data(), w.data(), y.data(), n, k, m);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n, k, m, 1.0);
}

// dx (n, k) += dy · w^T only.
template <class T>
void BM_MatmulBackwardDx(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const std::vector<T> x = filled<T>(n * k, 1), w = filled<T>(k * m, 2), dy = filled<T>(n * m, 3);
  std::vector<T> dx(static_cast<size_t>(n * k), T(0));
  for (auto _ : state) {
    parity::matmul_backward<T>(x.data(), w.data(), dy.data(), dx.data(), nullptr, n, k, m);
    benchmark::DoNotOptimize(dx.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n, k, m, 1.0);
}

// dw (k, m) += x^T · dy only.
template <class T>
void BM_MatmulBackwardDw(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const std::vector<T> x = filled<T>(n * k, 1), w = filled<T>(k * m, 2), dy = filled<T>(n * m, 3);
  std::vector<T> dw(static_cast<size_t>(k * m), T(0));
  for (auto _ : state) {
    parity::matmul_backward<T>(x.data(), w.data(), dy.data(), nullptr, dw.data(), n, k, m);
    benchmark::DoNotOptimize(dw.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n, k, m, 1.0);
}

// The forward with an explicit kernel (range 3: 0 = baseline x86-64, 1 = avx2); both give
// bitwise the same result, this shows what the wider vectors buy.
template <class T>
void BM_MatmulForwardIsa(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const parity::MatmulIsa isa = state.range(3) == 0 ? parity::MatmulIsa::baseline : parity::MatmulIsa::avx2;
  if (!parity::matmul_isa_available(isa)) {
    state.SkipWithError("kernel not available on this CPU");
    return;
  }
  const std::vector<T> x = filled<T>(n * k, 1), w = filled<T>(k * m, 2);
  std::vector<T> y(static_cast<size_t>(n * m));
  for (auto _ : state) {
    parity::matmul_forward(x.data(), w.data(), y.data(), n, k, m, isa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n, k, m, 1.0);
  state.SetLabel(state.range(3) == 0 ? "baseline" : "avx2");
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({1024, 128, 512});  // the reference shape: (1024, 128) x (128, 512)
  b->Args({256, 512, 128});
  b->Args({63, 65, 67});      // odd sizes: tails of every block
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_MatmulForward<double>)->Apply(shapes);
BENCHMARK(BM_MatmulBackwardDx<double>)->Apply(shapes);
BENCHMARK(BM_MatmulBackwardDw<double>)->Apply(shapes);
BENCHMARK(BM_MatmulForwardIsa<double>)->Args({1024, 128, 512, 0})->Args({1024, 128, 512, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatmulForward<float>)->Apply(shapes);
BENCHMARK(BM_MatmulBackwardDx<float>)->Apply(shapes);
BENCHMARK(BM_MatmulBackwardDw<float>)->Apply(shapes);

}  // namespace
