// Stage, error checks and counters (kernels/runtime.cuh).
#include "kernels/runtime.cuh"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/scalar_math.h"

namespace parity::cuda {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// PARITY_CUDA_PROFILE=1: wall time per op (staging, kernels and the wait), printed to
// stderr when the process exits, to see where a GPU step goes.
struct Profile {
  bool on = std::getenv("PARITY_CUDA_PROFILE") != nullptr;
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, int64_t>> ops;    // op -> (calls, ns)
  std::map<std::string, std::pair<int64_t, int64_t>> gaps;   // "previous op -> op" -> (calls, host ns between)
  ~Profile() {
    if (!on || ops.empty()) return;
    int64_t total = 0;
    for (const auto& [k, v] : ops) total += v.second;
    std::fprintf(stderr, "cuda op profile (wall time inside ops, %.3f s in all):\n", total * 1e-9);
    for (const auto& [k, v] : ops)
      std::fprintf(stderr, "  %-28s %8lld calls %10.3f ms %5.1f%%\n", k.c_str(), static_cast<long long>(v.first),
                   v.second * 1e-6, 100.0 * static_cast<double>(v.second) / static_cast<double>(total));
    // Where the host time goes: the 15 largest gaps by the pair of ops around them.
    std::vector<std::pair<int64_t, std::string>> by;
    for (const auto& [k, v] : gaps) by.emplace_back(v.second, k);
    std::sort(by.rbegin(), by.rend());
    std::fprintf(stderr, "host time between ops, largest 15 (previous op -> next op):\n");
    for (size_t i = 0; i < by.size() && i < 15; ++i) {
      const auto& v = gaps[by[i].second];
      std::fprintf(stderr, "  %-52s %8lld times %10.3f ms %9.1f us each\n", by[i].second.c_str(),
                   static_cast<long long>(v.first), v.second * 1e-6, v.second * 1e-3 / static_cast<double>(v.first));
    }
  }
};
Profile& profile() {
  static Profile p;
  return p;
}

// Stage's temporaries come from the device's default stream-ordered pool, whose release
// threshold is 0: every synchronisation (one per op) hands the freed blocks back to the
// driver and the next op allocates them again. Keep them instead (the threshold at its
// maximum), once per process; PARITY_CUDA_POOL_KEEP=0 keeps the driver's default, to time
// the difference (docs/gpu.md).
void keep_pool_memory() {
  static const bool done = [] {
    const char* v = std::getenv("PARITY_CUDA_POOL_KEEP");
    if (v != nullptr && std::string(v) == "0") return true;
    int dev = 0;
    cudaMemPool_t pool{};
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
      uint64_t keep = UINT64_MAX;
      (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    (void)cudaGetLastError();
    return true;
  }();
  (void)done;
}
}  // namespace

std::atomic<int64_t> g_last_finish_ns{0};
const char* g_last_op = nullptr;  // the op that ended last (written under the profile's lock)

Stage::Stage() : t0_ns_(profile().on ? now_ns() : 0) {
  keep_pool_memory();
  if (t0_ns_ != 0 && g_last_finish_ns.load() != 0) gap_ns_ = t0_ns_ - g_last_finish_ns.load();
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(e));
}

bool device_accessible(const void* p) {
  if (!p) return true;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // plain host memory on some drivers: clear the sticky-free error
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

Stage::~Stage() {
  for (void* t : temps_) cudaFreeAsync(t, stream());
}

void* Stage::scratch_bytes(int64_t bytes) {
  void* d = nullptr;
  const size_t sz = static_cast<size_t>(bytes > 0 ? bytes : 1);
  check(cudaMallocAsync(&d, sz, stream()), "cudaMallocAsync (stage scratch)");
  temps_.push_back(d);
  check(cudaMemsetAsync(d, 0, sz, stream()), "cudaMemsetAsync (stage scratch)");
  return d;
}

void* Stage::stage(const void* p, int64_t bytes, bool back) {
  if (!p || bytes <= 0 || device_accessible(p)) return const_cast<void*>(p);
  void* d = nullptr;
  check(cudaMallocAsync(&d, static_cast<size_t>(bytes), stream()), "cudaMallocAsync (stage)");
  temps_.push_back(d);
  check(cudaMemcpyAsync(d, p, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream()), "stage in");
  copies_.push_back({const_cast<void*>(p), d, bytes, back});
  return d;
}

void Stage::launched(const char* op) {
  op_ = op;
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw Error(std::string("cuda kernel ") + op + ": " + cudaGetErrorString(e));
}

void Stage::finish() {
  for (const Copy& c : copies_)
    if (c.back)
      check(cudaMemcpyAsync(c.host, c.dev, static_cast<size_t>(c.bytes), cudaMemcpyDeviceToHost, stream()),
            "stage out");
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (after a kernel)");
  copies_.clear();
  if (profile().on && op_ != nullptr) {
    Profile& p = profile();
    std::lock_guard<std::mutex> lock(p.mu);
    const int64_t t1 = now_ns();
    auto& e = p.ops[op_];
    e.first += 1;
    e.second += t1 - t0_ns_;
    auto& h = p.ops[std::string("(host, before) ") + op_];  // host code since the previous op ended
    h.first += 1;
    h.second += gap_ns_;
    auto& pair = p.gaps[std::string(g_last_op ? g_last_op : "(start)") + " -> " + op_];
    pair.first += 1;
    pair.second += gap_ns_;
    g_last_finish_ns = t1;
    g_last_op = op_;
  }
}

namespace {
__global__ void first_bad_kernel(const int64_t* ids, int64_t n, int64_t bound, unsigned long long* first) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (ids[i] < 0 || ids[i] >= bound) atomicMax(first, static_cast<unsigned long long>(n - i));
}
}  // namespace

void launch_first_bad(const int64_t* ids, int64_t n, int64_t bound, unsigned long long* first) {
  first_bad_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(ids, n, bound, first);
}

void throw_first_bad(const int64_t* d_ids, int64_t n, int64_t bound, const unsigned long long* d_first,
                     const char* what) {
  unsigned long long first = 0;
  check(cudaMemcpy(&first, d_first, sizeof first, cudaMemcpyDeviceToHost), what);
  if (first == 0) return;
  int64_t id = 0;
  const int64_t i = n - static_cast<int64_t>(first);
  check(cudaMemcpy(&id, d_ids + i, sizeof id, cudaMemcpyDefault), what);
  ops_detail::check_index(id, bound, what);
  throw Error(std::string(what) + ": index out of range");  // not reached: ids[i] is out of range
}

}  // namespace parity::cuda
