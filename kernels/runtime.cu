// Stage, error checks and counters (kernels/runtime.cuh).
#include "kernels/runtime.cuh"

#include <atomic>
#include <string>

#include "core/error.h"

namespace parity::cuda {

namespace {
std::atomic<int64_t> g_staged_bytes{0}, g_staged_buffers{0}, g_ops{0};
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
  g_staged_bytes += bytes;
  g_staged_buffers += 1;
  return d;
}

void Stage::launched(const char* op) {
  ++g_ops;
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
}

Counters counters() { return {g_staged_bytes.load(), g_staged_buffers.load(), g_ops.load()}; }
void reset_counters() {
  g_staged_bytes = 0;
  g_staged_buffers = 0;
  g_ops = 0;
}

}  // namespace parity::cuda
