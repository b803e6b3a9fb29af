// Wall-clock helpers shared by the runners, the benchmarks and the golden jobs.
#pragma once
#include <chrono>
#include <cstdint>

namespace parity {

// Seconds of the steady clock since t0.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Nanoseconds since the Unix epoch (system clock): comparable across processes on one host.
inline int64_t unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace parity
