// Dense row-major tensors of one element type, and the dtype tag used in files and reports.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"

namespace parity {

enum class DType { f32, f64, i64 };

std::string_view dtype_name(DType d);  // "fp32", "fp64", "int64"
DType parse_dtype(std::string_view s); // throws Error on an unknown name
int64_t dtype_size(DType d);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

// The one dtype dispatch of a run: calls f(float{}) for f32 and f(double{}) for f64 (the
// compute types a model runs in), so a templated job is written `with_real(d, [&](auto x) {
// return job<decltype(x)>(...); })`.
template <class F> decltype(auto) with_real(DType d, F&& f) {
  return d == DType::f32 ? f(float{}) : f(double{});
}
// The same over every element type a buffer may hold (collectives, checkpoints): f(float{}),
// f(double{}) or f(int64_t{}).
template <class F> decltype(auto) with_dtype(DType d, F&& f) {
  if (d == DType::f32) return f(float{});
  if (d == DType::f64) return f(double{});
  return f(int64_t{});
}

using Shape = std::vector<int64_t>;
int64_t numel(const Shape& s);
std::string shape_str(const Shape& s); // "(2, 3)"

template <class T> struct Tensor {
  Shape shape;
  Buffer<T> data;  // managed memory when the process runs on cuda (core/buffer.h)

  Tensor() = default;
  explicit Tensor(Shape s) : shape(std::move(s)), data(zeros<T>(parity::numel(shape))) {}
  Tensor(Shape s, Buffer<T> d) : shape(std::move(s)), data(std::move(d)) {}
  Tensor(Shape s, const std::vector<T>& d) : shape(std::move(s)), data(d.begin(), d.end()) {}
  Tensor(Shape s, std::initializer_list<T> d) : shape(std::move(s)), data(d) {}

  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }
  void zero() { std::fill(data.begin(), data.end(), T(0)); }
};

}  // namespace parity
