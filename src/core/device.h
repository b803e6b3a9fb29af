// Where this process computes: the CPU reference ops, or their CUDA twins in kernels/.
// Chosen once per process (a rank, or the one-device baseline) before its model is built;
// src/ops dispatches on it, and core/buffer.h puts the model's buffers in managed memory
// when it is cuda, so tensors live on the GPU and the host touches them only where it must.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace parity {

enum class Device { cpu, cuda };

std::string_view device_name(Device d);  // "cpu", "cuda"
Device parse_device(std::string_view s); // throws ConfigError on an unknown name

// Whether this build has the CUDA kernels, and how many GPUs this process sees (0 without
// a build, a driver or a device; never throws).
bool cuda_compiled();
int cuda_device_count();
// "" when `cuda` can run here, else why not ("this build has no CUDA", "no CUDA device").
std::string cuda_unavailable_reason();
// Throws UnavailableError("<what>: <reason>") (exit 77, ctest's skip) when d is cuda and
// cuda cannot run here; checks only, selects nothing (a launcher calls it before any rank).
void require_device(Device d, const std::string& what);

// Memory this process may use, in bytes: the host's physical memory, or less where a cgroup
// (a container) limits it; and the sum of the visible GPUs' memory (0 without CUDA). Never throw.
int64_t host_memory_bytes();
int64_t cuda_memory_bytes();

// Selects the device of this process. cuda: the GPU local_rank % cuda_device_count(), so
// ranks on one host share the GPUs round-robin (W ranks may share one GPU). Throws Error
// UnavailableError (require_device) when cuda cannot run.
void use_device(Device d, int local_rank = 0);
Device current_device();
inline bool on_cuda() { return current_device() == Device::cuda; }

}  // namespace parity
