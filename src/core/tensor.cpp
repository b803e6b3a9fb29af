#include "core/tensor.h"

#include <algorithm>

#include "core/error.h"

namespace parity {

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "fp32";
    case DType::f64: return "fp64";
    case DType::i64: return "int64";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "float32") return DType::f32;
  if (s == "fp64" || s == "float64") return DType::f64;
  if (s == "int64") return DType::i64;
  throw Error("unknown dtype '" + std::string(s) + "' (expected fp32 or fp64)");
}

int64_t dtype_size(DType d) { return d == DType::f32 ? 4 : 8; }

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace parity
