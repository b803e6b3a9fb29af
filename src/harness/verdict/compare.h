// One compare function for the whole project (ARCHITECTURE.md 5): a tensor against its
// reference gives one report, never one failure per element. The scale ratio
// <x, ref> / ||ref||^2 names the common parallelism bug: 2.000 or tp_size or 1/ep is a
// missing or doubled reduction, not rounding.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "harness/verdict/tolerance.h"

namespace parity {

struct Mismatch {
  Shape index;  // multi-index in the global tensor
  double got, ref;
};

struct CompareReport {
  std::string name;
  int64_t total = 0, bad = 0;  // elements, and those over the element bound
  double norm_rel_err = 0;     // ||x - ref|| / ||ref|| (||x - ref|| when ||ref|| == 0)
  double scale_ratio = 1;      // <x, ref> / ||ref||^2 (1 when ||ref|| == 0 and x == 0)
  double max_abs_err = 0;
  Mismatch worst;              // the element with the largest |x - ref|
  std::vector<Mismatch> first_bad;  // up to kFirstBad, in index order
  bool shape_ok = true;
  bool ok = true;               // shape_ok && norm_rel_err <= tol.norm_rel && finite

  static constexpr int kFirstBad = 5;
};

Shape unravel(int64_t flat, const Shape& shape);
std::string index_str(const Shape& index);  // "[2, 0, 5]"

// got and ref flat buffers of `shape` (row-major). Non-finite values in got (NaN, inf)
// where ref is finite always fail.
template <class T>
CompareReport compare(const std::string& name, const T* got, const T* ref, const Shape& shape, Tolerance tol);
template <class T>
CompareReport compare(const std::string& name, const Tensor<T>& got, const Tensor<T>& ref, Tolerance tol);

// Sums of squares behind a report, so tensors of one family combine into one normwise
// error and one scale ratio.
struct NormSums {
  double diff2 = 0, ref2 = 0, dot = 0;
  void add(const NormSums& o) { diff2 += o.diff2, ref2 += o.ref2, dot += o.dot; }
  double norm_rel_err() const;
  double scale_ratio() const;
};
template <class T> NormSums norm_sums(const T* got, const T* ref, int64_t n);

}  // namespace parity
