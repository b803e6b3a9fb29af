// Device-side helpers every kernel file shares: grid-stride indices, exp / log / sqrt in
// the element type (float math stays float, as std::exp(float) on the CPU), the stable
// sigmoid of ops/scalar_math.h, and staging that leaves empty buffers as nullptr.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/runtime.cuh"

namespace parity::cuda {

__device__ inline int64_t thread_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t thread_count() { return int64_t(gridDim.x) * blockDim.x; }

__device__ inline float dev_exp(float x) { return expf(x); }
__device__ inline double dev_exp(double x) { return ::exp(x); }
__device__ inline float dev_log(float x) { return logf(x); }
__device__ inline double dev_log(double x) { return ::log(x); }
__device__ inline float dev_sqrt(float x) { return sqrtf(x); }
__device__ inline double dev_sqrt(double x) { return ::sqrt(x); }

// ops_detail::stable_sigmoid: exp only ever of a non-positive number.
template <class T> __device__ inline T stable_sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + dev_exp(-x));
  const T e = dev_exp(x);
  return e / (T(1) + e);
}

// Stage::in / out, but nullptr for an empty buffer (kernels never read it).
template <class T> const T* stage_in(Stage& st, const T* p, int64_t n) { return n > 0 ? st.in(p, n) : nullptr; }
template <class T> T* stage_out(Stage& st, T* p, int64_t n) { return n > 0 ? st.out(p, n) : nullptr; }

}  // namespace parity::cuda
