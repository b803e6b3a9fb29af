// What every kernel file shares: error checks, the stream, launch sizes, and Stage, which
// makes any pointer (device, managed or plain host) usable by a kernel.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace parity::cuda {

// Throws parity::Error("<what>: <CUDA error string>") unless e == cudaSuccess.
void check(cudaError_t e, const char* what);
// The stream every parity kernel and cuBLAS call of this thread runs on.
inline cudaStream_t stream() { return cudaStreamPerThread; }

constexpr int kThreads = 256;
// Blocks for one thread per element of n (at least 1, so a launch of n = 0 is still valid).
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

// True when a kernel may dereference p as it is (device or managed memory).
bool device_accessible(const void* p);

// Usage: Stage st; auto dx = st.in(x, n); auto dy = st.out(y, n); kernel<<<..., stream()>>>(dx, dy);
//        st.launched("layernorm_forward"); st.finish();
// in(): host memory is copied to a device temporary. out(): the same, and finish() copies
// it back (outputs are copied in too, because backwards accumulate). Device and managed
// pointers pass through untouched; nullptr stays nullptr. finish() waits for the stream,
// so the caller sees the results; it throws on any kernel error. Temporaries are freed by
// the destructor on every path.
class Stage {
 public:
  Stage();
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;
  ~Stage();

  template <class T> const T* in(const T* p, int64_t n) {
    return static_cast<const T*>(stage(p, n * static_cast<int64_t>(sizeof(T)), false));
  }
  template <class T> T* out(T* p, int64_t n) {
    return static_cast<T*>(stage(p, n * static_cast<int64_t>(sizeof(T)), true));
  }
  // A device scratch of n elements, zeroed (for results such as a returned sum).
  template <class T> T* scratch(int64_t n) {
    return static_cast<T*>(scratch_bytes(n * static_cast<int64_t>(sizeof(T))));
  }
  // Checks the launch just made (cudaGetLastError) and names the op on failure.
  void launched(const char* op);
  void finish();

 private:
  struct Copy {
    void* host;
    void* dev;
    int64_t bytes;
    bool back;
  };
  void* stage(const void* p, int64_t bytes, bool back);
  void* scratch_bytes(int64_t bytes);
  std::vector<Copy> copies_;
  std::vector<void*> temps_;
  const char* op_ = nullptr;
  int64_t t0_ns_ = 0, gap_ns_ = 0;
};

// Index checks with the CPU's errors (the ops that take ids, targets or choices):
// launch_first_bad sets *first = max over bad i of n - i (0: none), an integer atomic, so
// indices i < n - *first are all valid; after Stage::finish(), throw_first_bad throws what
// ops_detail::check_index throws for the first bad one, if any.
void launch_first_bad(const int64_t* ids, int64_t n, int64_t bound, unsigned long long* first);
void throw_first_bad(const int64_t* d_ids, int64_t n, int64_t bound, const unsigned long long* d_first,
                     const char* what);

}  // namespace parity::cuda
