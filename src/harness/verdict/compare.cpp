#include "harness/verdict/compare.h"

#include <cmath>

namespace parity {

Shape unravel(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t n = shape[d] > 0 ? shape[d] : 1;
    idx[d] = flat % n;
    flat /= n;
  }
  return idx;
}

std::string index_str(const Shape& index) {
  std::string s = "[";
  for (size_t i = 0; i < index.size(); ++i) s += (i ? ", " : "") + std::to_string(index[i]);
  return s + "]";
}

double NormSums::norm_rel_err() const {
  if (ref2 == 0) return std::sqrt(diff2);
  return std::sqrt(diff2 / ref2);
}

double NormSums::scale_ratio() const {
  if (ref2 == 0) return dot == 0 && diff2 == 0 ? 1.0 : NAN;
  return dot / ref2;
}

template <class T> NormSums norm_sums(const T* got, const T* ref, int64_t n) {
  NormSums s;
  for (int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
    s.diff2 += (g - r) * (g - r);
    s.ref2 += r * r;
    s.dot += g * r;
  }
  return s;
}

template <class T>
CompareReport compare(const std::string& name, const T* got, const T* ref, const Shape& shape, Tolerance tol) {
  CompareReport rep;
  rep.name = name;
  rep.total = numel(shape);
  const NormSums sums = norm_sums(got, ref, rep.total);
  rep.norm_rel_err = sums.norm_rel_err();
  rep.scale_ratio = sums.scale_ratio();
  const double rms = rep.total ? std::sqrt(sums.ref2 / static_cast<double>(rep.total)) : 0.0;
  bool finite = true;
  for (int64_t i = 0; i < rep.total; ++i) {
    const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
    const double err = std::isfinite(g) || !std::isfinite(r) ? std::abs(g - r) : INFINITY;
    if (!std::isfinite(err) && std::isfinite(r)) finite = false;
    if (i == 0 || err > rep.max_abs_err) {
      rep.max_abs_err = err;
      rep.worst = {unravel(i, shape), g, r};
    }
    if (!(err <= tol.elem_rel * (std::abs(r) + rms))) {
      ++rep.bad;
      if (static_cast<int>(rep.first_bad.size()) < CompareReport::kFirstBad)
        rep.first_bad.push_back({unravel(i, shape), g, r});
    }
  }
  rep.ok = finite && rep.norm_rel_err <= tol.norm_rel;
  return rep;
}

template <class T>
CompareReport compare(const std::string& name, const Tensor<T>& got, const Tensor<T>& ref, Tolerance tol) {
  if (got.shape != ref.shape) {
    CompareReport rep;
    rep.name = name;
    rep.shape_ok = rep.ok = false;
    return rep;
  }
  return compare(name, got.ptr(), ref.ptr(), ref.shape, tol);
}

#define PARITY_INSTANTIATE(T)                                                                                  \
  template NormSums norm_sums<T>(const T*, const T*, int64_t);                                                 \
  template CompareReport compare<T>(const std::string&, const T*, const T*, const Shape&, Tolerance);          \
  template CompareReport compare<T>(const std::string&, const Tensor<T>&, const Tensor<T>&, Tolerance);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
