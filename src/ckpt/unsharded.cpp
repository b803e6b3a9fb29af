#include "ckpt/unsharded.h"

#include <cstdio>
#include <cstring>
#include <map>

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "mesh/mesh.h"

namespace parity::ckpt {

DType WholeTensor::dtype() const {
  return std::visit([](const auto& t) { return dtype_of<typename std::decay_t<decltype(t.data)>::value_type>(); },
                    value);
}
const Shape& WholeTensor::shape() const {
  return std::visit([](const auto& t) -> const Shape& { return t.shape; }, value);
}
const void* WholeTensor::data() const {
  return std::visit([](const auto& t) -> const void* { return t.data.data(); }, value);
}
int64_t WholeTensor::bytes() const { return numel(shape()) * dtype_size(dtype()); }

namespace {

WholeTensor make_whole(const TensorMeta& t) {
  switch (t.dtype) {
    case DType::f32: return {t.name, Tensor<float>(t.shape)};
    case DType::f64: return {t.name, Tensor<double>(t.shape)};
    case DType::i64: return {t.name, Tensor<int64_t>(t.shape)};
  }
  throw Error("checkpoint: tensor '" + t.name + "' has an unknown dtype");
}

template <class T> std::string value_str(const void* base, int64_t i) {
  T x;
  std::memcpy(&x, static_cast<const unsigned char*>(base) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  char buf[48];
  if constexpr (std::is_floating_point_v<T>)
    std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(x));
  else
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(x));
  return buf;
}

std::string value_at(DType d, const void* base, int64_t i) {
  return with_dtype(d, [&](auto x) { return value_str<decltype(x)>(base, i); });
}

// "" when the bits agree; else how many elements differ and the first one.
std::string diff_bits(const WholeTensor& a, const WholeTensor& b) {
  const int64_t n = numel(a.shape()), size = dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.data());
  const auto* pb = static_cast<const unsigned char*>(b.data());
  int64_t count = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(pa + i * size, pb + i * size, static_cast<size_t>(size)) != 0) {
      if (first < 0) first = i;
      ++count;
    }
  if (count == 0) return "";
  return a.name + ": " + std::to_string(count) + " of " + std::to_string(n) + " elements differ, first at flat index " +
         std::to_string(first) + ": " + value_at(a.dtype(), pa, first) + " vs " + value_at(a.dtype(), pb, first);
}

}  // namespace

UnshardedState read_unsharded(const std::string& dir) {
  UnshardedState st;
  const Checkpoint ck = Checkpoint::open(dir);
  st.md = ck.md();
  const mesh::Mesh one(LayoutConfig{});
  ShardedState state;
  st.tensors.reserve(st.md.tensors.size());  // the state points into these: no reallocation
  for (const TensorMeta& t : st.md.tensors) {
    st.tensors.push_back(make_whole(t));
    std::visit([&](auto& x) { state.add(t.name, t.shape, mesh::replicated(t.layout.view), x); },
               st.tensors.back().value);
  }
  load_rank(ck, one, state, 0, st.md.model);
  return st;
}

std::string export_name(const std::string& ckpt_name) {
  static const std::string prefix = "expert_bias.layers.";
  if (ckpt_name.rfind(prefix, 0) != 0) return ckpt_name;
  const std::string layer = ckpt_name.substr(prefix.size());
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return ckpt_name;
  return "layers." + layer + ".moe.expert_bias";
}

void write_unsharded(const UnshardedState& st, const std::string& path, bool force, const std::string& option) {
  SafetensorsWriter w;
  for (const WholeTensor& t : st.tensors) w.add(export_name(t.name), t.dtype(), t.shape(), t.data());
  w.set_metadata("format", "parity-export");
  w.set_metadata("step", std::to_string(st.md.step));
  w.set_metadata("data_position", std::to_string(st.md.data_position));
  w.set_metadata("model", st.md.model.dump());
  w.write(path, Replace{kExportSignature, force}, option);
}

std::vector<std::string> diff_unsharded(const UnshardedState& a, const UnshardedState& b) {
  std::vector<std::string> out;
  std::map<std::string, const WholeTensor*> in_b;
  for (const WholeTensor& t : b.tensors) in_b[t.name] = &t;
  for (const WholeTensor& ta : a.tensors) {
    const auto it = in_b.find(ta.name);
    if (it == in_b.end()) {
      out.push_back(ta.name + ": only in the first");
      continue;
    }
    const WholeTensor& tb = *it->second;
    in_b.erase(it);
    if (ta.dtype() != tb.dtype())
      out.push_back(ta.name + ": dtype " + std::string(dtype_name(ta.dtype())) + " vs " +
                    std::string(dtype_name(tb.dtype())));
    else if (ta.shape() != tb.shape())
      out.push_back(ta.name + ": shape " + shape_str(ta.shape()) + " vs " + shape_str(tb.shape()));
    else if (std::string d = diff_bits(ta, tb); !d.empty())
      out.push_back(d);
  }
  for (const auto& [name, t] : in_b) out.push_back(name + ": only in the second");
  if (a.md.step != b.md.step)
    out.push_back("step: " + std::to_string(a.md.step) + " vs " + std::to_string(b.md.step));
  if (a.md.data_position != b.md.data_position)
    out.push_back("data_position: " + std::to_string(a.md.data_position) + " vs " +
                  std::to_string(b.md.data_position));
  return out;
}

}  // namespace parity::ckpt
