// Elementwise glue between the ops (residual adds, copies, zeroing, scaling, the tied
// head's transpose): on the GPU these run as kernels, so the model's buffers never come
// back to the host between two ops. Each has a pointer form; some a Buffer form.
#pragma once
#include <cstdint>

#include "core/buffer.h"
#include "core/precision.h"

namespace parity {

// a (n) += b (n)
template <class T> void add_into(T* a, const T* b, int64_t n);
// dst (n) = src (n)
template <class T> void copy_values(T* dst, const T* src, int64_t n);
// x (n) = 0
template <class T> void zero_values(T* x, int64_t n);
// x (n) *= c
template <class T> void scale_values(T* x, T c, int64_t n);
// x (n) *= c; returns whether any result is an inf or a NaN (fp16's unscale, optim/loss_scaler.h)
template <class T> bool scale_find_non_finite(T* x, T c, int64_t n);
// max |x[i]| in double (a NaN passed over; 0 for n = 0), and sum of (x[i] / d)^2 in double (on the CPU
// in index order; on the GPU in fixed chunks summed in order): the logits' peak and the loss gradient's
// sum of squares the verdict's saturated-softmax floor reads (model/model.cpp, harness/verdict/tolerance.h)
template <class T> double max_abs(const T* x, int64_t n);
template <class T> double sum_sq_over(const T* x, int64_t n, double d);
// out (cols, rows) = x (rows, cols) transposed
template <class T> void transpose_into(const T* x, int64_t rows, int64_t cols, T* out);
// A storage point of the precision policy where the run computes (core/precision.h's to_storage
// and to_grad_storage): on cuda a kernel rounds a device-accessible buffer in place with the
// host's bits, so no page of the model's managed buffers moves to the host and back; the rounding
// twin's jitter (one host sequence over every storage point) and plain host memory round on the host.
// The (x, n, low) form rounds to `low` instead of the policy's format: a parameter's compute copy,
// whose format its plan entry holds (parallel/param_plan.h `compute_copy`).
template <class T> void storage_point(T* x, int64_t n);
template <class T> void storage_point(T* x, int64_t n, Low low);
template <class T> void grad_storage_point(T* x, int64_t n);

// a += b over a.size() elements (b must be at least as long).
template <class T> void add_into(Buffer<T>& a, const Buffer<T>& b) {
  add_into(a.data(), b.data(), static_cast<int64_t>(a.size()));
}
// A copy of x[0, n) in a new Buffer.
template <class T> Buffer<T> copy_of(const T* x, int64_t n) {
  Buffer<T> out = zeros<T>(n);
  copy_values(out.data(), x, n);
  return out;
}
// (rows, cols) row-major -> (cols, rows)
template <class T> Buffer<T> transpose(const T* x, int64_t rows, int64_t cols) {
  Buffer<T> out = zeros<T>(rows * cols);
  transpose_into(x, rows, cols, out.data());
  return out;
}

}  // namespace parity
