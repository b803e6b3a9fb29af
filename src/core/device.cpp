#include "core/device.h"

#include <unistd.h>

#include <atomic>
#include <fstream>

#include "core/error.h"

#if PARITY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace parity {

namespace {
std::atomic<Device> g_device{Device::cpu};
}

std::string_view device_name(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device::cpu;
  if (s == "cuda" || s == "gpu") return Device::cuda;
  throw ConfigError("device", "unknown device '" + std::string(s) + "' (expected cpu or cuda)");
}

bool cuda_compiled() {
#if PARITY_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if PARITY_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

std::string cuda_unavailable_reason() {
  if (!cuda_compiled()) return "this build of parity has no CUDA (configure with the CUDA toolkit and NCCL)";
#if PARITY_HAVE_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device (") + cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "no CUDA device";
#endif
  return "";
}

namespace {
// A cgroup's limit in bytes from a file holding a number ("max" or anything else: none).
int64_t cgroup_limit(const char* path) {
  std::ifstream in(path);
  long long v = 0;
  if (!(in >> v) || v <= 0) return 0;
  return static_cast<int64_t>(v);
}
}  // namespace

int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  int64_t bytes = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  for (const char* limit : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const int64_t v = cgroup_limit(limit);
    if (v > 0 && (bytes == 0 || v < bytes)) bytes = v;  // v1 reports "no limit" as a huge number
  }
  return bytes;
}

int64_t cuda_memory_bytes() {
  int64_t total = 0;
#if PARITY_HAVE_CUDA
  const int n = cuda_device_count();
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) total += static_cast<int64_t>(prop.totalGlobalMem);
    else (void)cudaGetLastError();
  }
#endif
  return total;
}

void require_device(Device d, const std::string& what) {
  if (d != Device::cuda) return;
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw UnavailableError(what + ": " + why);
}

void use_device(Device d, int local_rank) {
  require_device(d, "device cuda");
  if (d == Device::cuda) {
#if PARITY_HAVE_CUDA
    const int dev = local_rank % cuda_device_count();
    const cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) throw Error(std::string("device cuda: cudaSetDevice: ") + cudaGetErrorString(e));
#endif
  }
  (void)local_rank;
  g_device = d;
}

Device current_device() { return g_device.load(std::memory_order_relaxed); }

}  // namespace parity
