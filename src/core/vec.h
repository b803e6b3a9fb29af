// Small helpers on flat buffers shared by the one-device model and the parallel one.
#pragma once
#include <cstdint>
#include <vector>

namespace parity {

template <class T> std::vector<T> zeros(int64_t n) { return std::vector<T>(static_cast<size_t>(n), T(0)); }

// a += b, element by element.
template <class T> void add_into(std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
}

// (rows, cols) row-major -> (cols, rows)
template <class T> std::vector<T> transpose(const T* x, int64_t rows, int64_t cols) {
  std::vector<T> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[static_cast<size_t>(j * rows + i)] = x[i * cols + j];
  return out;
}

}  // namespace parity
