#include "comm/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <thread>

#include <unistd.h>

#include "core/error.h"

namespace parity::comm {

namespace {

using clock = std::chrono::steady_clock;

struct Row {
  std::string op;
  int64_t bytes = 0, count = 0;
  double us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
};

double bus_factor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

// Runs op once on buffers of `count` elements per rank (the nccl-tests "count").
template <class T>
void run_op(Communicator& c, const std::string& op, std::vector<T>& a, std::vector<T>& b, int64_t count) {
  size_t n = static_cast<size_t>(count), p = static_cast<size_t>(c.size());
  if (op == "allreduce") c.allreduce(std::span<T>(a.data(), n), ReduceOp::sum);
  else if (op == "broadcast") c.broadcast(std::span<T>(a.data(), n), 0);
  else if (op == "allgather") c.allgather(std::span<const T>(a.data(), n / p), std::span<T>(b.data(), n / p * p));
  else if (op == "reduce_scatter")
    c.reduce_scatter(std::span<const T>(a.data(), n / p * p), std::span<T>(b.data(), n / p), ReduceOp::sum);
  else if (op == "alltoall") c.alltoall(std::span<const T>(a.data(), n / p * p), std::span<T>(b.data(), n / p * p));
  else throw ConfigError("ops", "unknown collective '" + op + "'");
}

// Exact check of one run: every rank contributes (rank + 1) in every element.
template <class T> int64_t check_op(Communicator& c, const std::string& op, int64_t count) {
  size_t n = static_cast<size_t>(count), p = static_cast<size_t>(c.size());
  std::vector<T> a(n, T(c.rank() + 1)), b(n, T(-1));
  run_op(c, op, a, b, count);
  T total = T(static_cast<double>(p * (p + 1) / 2));
  int64_t wrong = 0;
  if (op == "allreduce") for (size_t i = 0; i < n; ++i) wrong += a[i] != total;
  if (op == "broadcast") for (size_t i = 0; i < n; ++i) wrong += a[i] != T(1);
  if (op == "reduce_scatter") for (size_t i = 0; i < n / p; ++i) wrong += b[i] != total;
  if (op == "allgather" || op == "alltoall")
    for (size_t i = 0; i < n / p * p; ++i) wrong += b[i] != T(static_cast<double>(i / (n / p) + 1));
  return wrong;
}

template <class T> Row bench_one(Communicator& c, const std::string& op, int64_t count, int iters) {
  Row r;
  r.op = op;
  r.count = count;
  r.bytes = count * static_cast<int64_t>(sizeof(T));
  std::vector<int64_t> wrong = {check_op<T>(c, op, count)};
  c.allreduce(std::span<int64_t>(wrong), ReduceOp::sum);
  r.wrong = wrong[0];
  std::vector<T> a(static_cast<size_t>(count), T(1)), b(static_cast<size_t>(count));
  run_op(c, op, a, b, count);  // warm-up
  c.barrier();
  auto t0 = clock::now();
  for (int i = 0; i < iters; ++i) run_op(c, op, a, b, count);
  std::vector<double> us = {std::chrono::duration<double, std::micro>(clock::now() - t0).count() / iters};
  c.allreduce(std::span<double>(us), ReduceOp::max);
  r.us = us[0];
  r.algbw = r.bytes / r.us / 1e3;
  r.busbw = r.algbw * bus_factor(op, c.size());
  return r;
}

void print_row(std::ostream& out, const Row& r, DType t, bool json) {
  char line[256];
  std::string redop = r.op == "allreduce" || r.op == "reduce_scatter" ? "sum" : "none";
  if (json)
    std::snprintf(line, sizeof(line),
                  "{\"op\":\"%s\",\"size\":%lld,\"count\":%lld,\"type\":\"%s\",\"redop\":\"%s\","
                  "\"time_us\":%.2f,\"algbw\":%.3f,\"busbw\":%.3f,\"wrong\":%lld}\n",
                  r.op.c_str(), static_cast<long long>(r.bytes), static_cast<long long>(r.count),
                  std::string(dtype_name(t)).c_str(), redop.c_str(), r.us, r.algbw, r.busbw,
                  static_cast<long long>(r.wrong));
  else
    std::snprintf(line, sizeof(line), "%-15s %12lld %12lld %6s %6s %12.1f %8.3f %8.3f %7lld\n",
                  r.op.c_str(), static_cast<long long>(r.bytes), static_cast<long long>(r.count),
                  std::string(dtype_name(t)).c_str(), redop.c_str(), r.us, r.algbw, r.busbw,
                  static_cast<long long>(r.wrong));
  out << line << std::flush;
}

template <class T> int64_t bench_all(Communicator& c, const CommBenchOptions& o, std::ostream& out) {
  int64_t total_wrong = 0;
  int64_t p = c.size();
  for (const auto& op : o.ops) {
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= std::max(2, o.factor)) {
      int64_t count = std::max<int64_t>(1, bytes / static_cast<int64_t>(sizeof(T)));
      if (op != "allreduce" && op != "broadcast") count = std::max<int64_t>(p, count / p * p);
      int iters = static_cast<int>(
          std::clamp<int64_t>((int64_t{256} << 20) / std::max<int64_t>(bytes, 1) / 64, 2, o.max_iters));
      Row r = bench_one<T>(c, op, count, iters);
      total_wrong += r.wrong;
      if (c.rank() == 0) print_row(out, r, dtype_of<T>(), o.json);
    }
  }
  return total_wrong;
}

}  // namespace

double memcpy_gbps(int64_t bytes) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes));
  std::memcpy(b.data(), a.data(), a.size());
  int iters = 10;
  auto t0 = clock::now();
  for (int i = 0; i < iters; ++i) {
    std::memcpy(b.data(), a.data(), a.size());
    a[static_cast<size_t>(i)] = b[static_cast<size_t>(bytes - 1 - i)];  // keep the copies observable
  }
  double s = std::chrono::duration<double>(clock::now() - t0).count() / iters;
  return static_cast<double>(bytes) / s / 1e9;
}

double allreduce_ceiling_gbps(int ranks, int64_t bytes) {
  const size_t n = static_cast<size_t>(bytes) / sizeof(float), w = static_cast<size_t>(std::max(ranks, 1));
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const size_t threads = std::min(w, static_cast<size_t>(cores));
  std::vector<std::vector<float>> in(w, std::vector<float>(n, 1.0f)), out(w, std::vector<float>(n, 0.0f));
  constexpr size_t kTile = 4096;  // elements: the partial sum stays in L1 across the inputs
  auto work = [&](size_t t) {
    std::vector<float> acc(kTile);
    for (size_t o = t * kTile; o < n; o += threads * kTile) {
      const size_t m = std::min(kTile, n - o);
      std::memcpy(acc.data(), in[0].data() + o, m * sizeof(float));
      for (size_t b = 1; b < w; ++b)
        for (size_t i = 0; i < m; ++i) acc[i] += in[b][o + i];
      for (size_t b = 0; b < w; ++b) std::memcpy(out[b].data() + o, acc.data(), m * sizeof(float));
    }
  };
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = clock::now();
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work, t);
    for (auto& th : pool) th.join();
    best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
  }
  return static_cast<double>(bytes) / best / 1e9 * bus_factor("allreduce", static_cast<int>(w));
}

int64_t run_comm_bench(Communicator& c, const CommBenchOptions& o, std::ostream& out) {
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes) throw ConfigError("bytes", "need 1 <= min <= max");
  if (c.rank() == 0) {
    char head[512];
    const int64_t mib64 = int64_t{64} << 20;
    const double mem = memcpy_gbps(mib64);
    int at = std::snprintf(head, sizeof(head),
                           "# backend %s (%s), %d ranks; memcpy busbw ceiling %.2f GB/s (64 MiB, one process)\n",
                           std::string(backend_name(c.backend())).c_str(), c.transport().c_str(), c.size(), mem);
    // The host's own bound for this many ranks (only worth its 2 x n x 64 MiB when allreduce
    // is timed at 1 MiB or more): the other ranks wait in the barrier meanwhile, asleep.
    if (c.size() > 1 && o.max_bytes >= (int64_t{1} << 20) &&
        std::find(o.ops.begin(), o.ops.end(), "allreduce") != o.ops.end()) {
      const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
      const double ceil = allreduce_ceiling_gbps(c.size(), mib64);
      std::snprintf(head + at, sizeof(head) - static_cast<size_t>(at),
                    "# allreduce ceiling of this host for %d ranks: busbw %.2f GB/s (%.0f%% of memcpy; 64 MiB, %d "
                    "buffers reduced in place by %ld threads on %ld cores, no copies, no waits)\n",
                    c.size(), ceil, 100.0 * ceil / mem, c.size(), std::min<long>(c.size(), cores), cores);
    }
    if (!o.json) {
      out << head;
      out << "# collective          size        count   type  redop    time(us)  algbw    busbw  #wrong\n";
      out << "#                     (B)      (elems)                              (GB/s)   (GB/s)\n";
    }
  }
  return with_dtype(o.dtype, [&](auto x) { return bench_all<decltype(x)>(c, o, out); });
}

}  // namespace parity::comm
