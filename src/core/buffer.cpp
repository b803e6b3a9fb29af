#include "core/buffer.h"

#include "core/resources.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/device.h"
#include "core/error.h"

#if PARITY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace parity {

namespace buffer_detail {

#if PARITY_HAVE_CUDA
namespace {

// Blocks are rounded up to a size class and kept on a free list per class when freed.
// Small blocks are carved from 2 MiB slabs (one cudaMallocManaged per slab).
constexpr std::size_t kSmall = 64 << 10, kSlab = 2 << 20, kSmallAlign = 256, kLargeAlign = 1 << 20;
constexpr std::size_t kHeadroom = std::size_t(512) << 20;  // left free for CUDA, cuBLAS and NCCL

std::size_t size_class(std::size_t bytes) {
  const std::size_t a = bytes < kSmall ? kSmallAlign : kLargeAlign;
  return std::max<std::size_t>(a, (bytes + a - 1) / a * a);
}

struct Pool {
  std::mutex mu;
  std::unordered_map<void*, std::size_t> live;         // block -> its class
  std::map<std::size_t, std::vector<void*>> free_list;  // class -> cached blocks
  char* slab = nullptr;
  std::size_t slab_left = 0;
  int64_t pool_bytes = 0, live_bytes = 0, peak = 0, allocs = 0, fills = 0;
  double alloc_s = 0, fill_s = 0;
  std::atomic<bool> used{false};  // any managed block ever handed out (deallocate looks only then)

  void* managed(std::size_t bytes) {
    // Never ask for more managed memory than the GPU has free (oversubscribed managed
    // memory can stall the whole GPU, not only this process): refuse with the numbers.
    std::size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && bytes + kHeadroom > free_b)
      throw Error("buffer: the GPU has " + std::to_string(free_b >> 20) + " MiB free of " +
                  std::to_string(total_b >> 20) + " MiB; this process holds " + std::to_string(pool_bytes >> 20) +
                  " MiB and asks for " + std::to_string(bytes >> 20) + " MiB more (a smaller model, fewer ranks "
                  "per GPU or fp32 fits)");
    void* p = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t e = cudaMallocManaged(&p, bytes);
    alloc_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++allocs;
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error("buffer: cudaMallocManaged of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e) +
                  " (pool holds " + std::to_string(pool_bytes) + " bytes)");
    }
    pool_bytes += static_cast<int64_t>(bytes);
    return p;
  }
  void* take(std::size_t cls) {
    auto it = free_list.find(cls);
    if (it != free_list.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
    if (cls >= kSmall) return managed(cls);
    if (slab_left < cls) {
      slab = static_cast<char*>(managed(kSlab));
      slab_left = kSlab;
    }
    void* p = slab;
    slab += cls;
    slab_left -= cls;
    return p;
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: buffers may be freed during static destruction
  return *p;
}

}  // namespace
#endif

void* allocate(std::size_t bytes) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) {
    Pool& p = pool();
    const std::size_t cls = size_class(bytes);
    void* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(p.mu);
      block = p.take(cls);
      p.live[block] = cls;
      p.used = true;
      p.live_bytes += static_cast<int64_t>(cls);
      p.peak = std::max(p.peak, p.live_bytes);
    }
    ZeroFill& z = zero_fill();
    if (z.requested && !z.done) {
      // Zero on the device (the pages stay there), and wait: the host may read it next.
      cudaStream_t s = cudaStreamPerThread;
      const auto t0 = std::chrono::steady_clock::now();
      if (cudaMemsetAsync(block, 0, bytes, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess) {
        (void)cudaGetLastError();
        throw Error("buffer: zero-fill on the device failed");
      }
      std::lock_guard<std::mutex> lock(p.mu);
      p.fill_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++p.fills;
      z.done = true;
    }
    return block;
  }
#endif
  void* out = ::operator new(bytes);
  if (bytes >= (std::size_t{64} << 10)) advise_heap_huge_pages();  // the heap grew: onto huge pages
  return out;
}

namespace {
// The lent ranges (lend): few (one per shared baseline file a process maps), read on every deallocation
// without a lock; written under one.
constexpr int kLendSlots = 16;
std::atomic<std::uintptr_t> g_lent_lo[kLendSlots], g_lent_hi[kLendSlots];
std::atomic<int> g_lent_count{0};
std::mutex g_lend_mu;
}  // namespace

void lend(const void* base, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(g_lend_mu);
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  for (int i = 0; i < kLendSlots; ++i)
    if (g_lent_lo[i].load() == 0) {
      g_lent_hi[i].store(lo + bytes);
      g_lent_lo[i].store(lo);
      g_lent_count.fetch_add(1);
      return;
    }
  throw Error("buffer: more than " + std::to_string(kLendSlots) + " ranges lent at once");
}

void unlend(const void* base) noexcept {
  std::lock_guard<std::mutex> lock(g_lend_mu);
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  for (int i = 0; i < kLendSlots; ++i)
    if (g_lent_lo[i].load() == lo) {
      g_lent_lo[i].store(0);
      g_lent_count.fetch_sub(1);
      return;
    }
}

bool lent(const void* p) noexcept {
  if (g_lent_count.load(std::memory_order_acquire) == 0) return false;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (int i = 0; i < kLendSlots; ++i) {
    const std::uintptr_t lo = g_lent_lo[i].load(std::memory_order_acquire);
    if (lo != 0 && a >= lo && a < g_lent_hi[i].load(std::memory_order_acquire)) return true;
  }
  return false;
}

void deallocate(void* p, std::size_t bytes) noexcept {
  if (lent(p)) return;  // borrow(): the lender's memory
#if PARITY_HAVE_CUDA
  Pool& pl = pool();
  if (pl.used) {
    std::lock_guard<std::mutex> lock(pl.mu);
    auto it = pl.live.find(p);
    if (it != pl.live.end()) {
      pl.free_list[it->second].push_back(p);
      pl.live_bytes -= static_cast<int64_t>(it->second);
      pl.live.erase(it);
      return;
    }
  }
#endif
  ::operator delete(p, bytes);
}

}  // namespace buffer_detail

BufferStats buffer_stats() {
#if PARITY_HAVE_CUDA
  auto& p = buffer_detail::pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return {p.pool_bytes, p.live_bytes, p.peak, p.allocs, p.alloc_s, p.fills, p.fill_s};
#else
  return {};
#endif
}

}  // namespace parity
