// Buffer<T>: the storage of every model tensor. A std::vector whose allocator follows the
// process's device (core/device.h): plain heap memory on cpu; CUDA managed memory on cuda,
// so the kernels of kernels/ work on it in place and the host can still read it (pages
// move on demand). Managed blocks come from a caching pool: a block freed in one step is
// reused by the same-sized allocation of the next, with no cudaMalloc/cudaFree per step.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace parity {

namespace buffer_detail {
// Managed memory from the pool when the process runs on cuda, else ::operator new.
void* allocate(std::size_t bytes);
void deallocate(void* p, std::size_t bytes) noexcept;
// Set by zeros(): the next allocation of this thread is zero-filled on the device, so the
// vector's value-initialisation may skip writing zeros from the host (which would pull
// the pages to the host only for the first kernel to pull them back).
struct ZeroFill {
  bool requested = false;  // inside zeros()
  bool done = false;       // the allocation made inside it was zeroed on the device
};
// Inline (not a call into buffer.cpp): the vector's value-initialisation asks it once per
// element, and an out-of-line call there cost ~1.3 ns per element (3 ms per 2M-element
// buffer, on cpu as on cuda, where it was most of the large model's host time between ops);
// inline, the compiler hoists it and the loop becomes a memset, or nothing.
inline thread_local ZeroFill tl_zero_fill;
inline ZeroFill& zero_fill() { return tl_zero_fill; }
// borrow(): the next allocation of exactly `bytes` is `at` itself, and its elements are left as they are
struct Borrow {
  void* at = nullptr;
  std::size_t bytes = 0;
  bool handed = false;  // `at` was handed out: the vector's value-initialization leaves it alone
};
inline thread_local Borrow tl_borrow;
// Memory lent to buffers (a read-only file mapping): deallocate() never frees a pointer inside a lent range.
void lend(const void* base, std::size_t bytes);
void unlend(const void* base) noexcept;
bool lent(const void* p) noexcept;
}  // namespace buffer_detail

template <class T> struct DeviceAllocator {
  using value_type = T;
  DeviceAllocator() noexcept = default;
  template <class U> DeviceAllocator(const DeviceAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    buffer_detail::Borrow& b = buffer_detail::tl_borrow;
    if (b.at != nullptr && b.bytes == n * sizeof(T)) {
      T* p = static_cast<T*>(b.at);
      b.at = nullptr, b.handed = true;
      return p;
    }
    return static_cast<T*>(buffer_detail::allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { buffer_detail::deallocate(p, n * sizeof(T)); }
  template <class U, class... A> void construct(U* p, A&&... args) {
    if constexpr (sizeof...(A) == 0) {
      if (buffer_detail::zero_fill().done) return;     // already zero, on the device
      if (buffer_detail::tl_borrow.handed) return;     // borrowed: its values are the lender's
    }
    ::new (static_cast<void*>(p)) U(std::forward<A>(args)...);
  }
  template <class U> bool operator==(const DeviceAllocator<U>&) const noexcept { return true; }
};

template <class T> using Buffer = std::vector<T, DeviceAllocator<T>>;

// n zeros; on cuda zero-filled by the device.
template <class T> Buffer<T> zeros(int64_t n) {
  auto& z = buffer_detail::zero_fill();
  z = {true, false};
  struct Reset {
    buffer_detail::ZeroFill& z;
    ~Reset() { z = {}; }
  } reset{z};
  return Buffer<T>(static_cast<std::size_t>(n));
}

// Element-wise equality with a plain vector (found by ADL through the allocator).
// A buffer over `n` elements at `at`, which stay where they are (no copy, no allocation): memory inside a range
// lent with buffer_detail::lend, which the caller keeps mapped and unchanged while the buffer lives, and never
// writes through it. Freeing it leaves the memory alone; copying it copies as any buffer. (The shared baseline's
// records, read in place: harness/runner/shared_baseline_read.cpp.)
template <class T> Buffer<T> borrow(const T* at, int64_t n) {
  auto& b = buffer_detail::tl_borrow;
  b = {const_cast<T*>(at), static_cast<std::size_t>(n) * sizeof(T), false};
  struct Reset {
    buffer_detail::Borrow& b;
    ~Reset() { b = {}; }
  } reset{b};
  return Buffer<T>(static_cast<std::size_t>(n));
}

template <class T> bool operator==(const Buffer<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

template <class T> Buffer<T> to_buffer(const std::vector<T>& v) { return Buffer<T>(v.begin(), v.end()); }
template <class T> std::vector<T> to_vector(const Buffer<T>& b) { return std::vector<T>(b.begin(), b.end()); }

// Managed bytes held by the pool (in use + cached) and in use now; 0 on cpu.
struct BufferStats {
  int64_t pool_bytes = 0;
  int64_t live_bytes = 0;
  int64_t peak_live_bytes = 0;
  int64_t managed_allocs = 0;      // cudaMallocManaged calls
  double managed_alloc_s = 0;      // time in them
  int64_t zero_fills = 0;          // zeros() filled on the device
  double zero_fill_s = 0;          // time in them (memset and wait)
};
BufferStats buffer_stats();

}  // namespace parity
