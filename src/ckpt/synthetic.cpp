#include "ckpt/synthetic.h"

#include <cstring>

#include "mesh/param_layout.h"
#include "model/params.h"

namespace parity::ckpt {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ULL;
  return h;
}

}  // namespace

double SyntheticState::value(const std::string& name, int64_t g, uint64_t salt) {
  const uint64_t h = mix(name_hash(name) ^ mix(static_cast<uint64_t>(g) + salt));
  if (h % 97 == 0) return -0.0;
  return (static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0) * static_cast<double>(1 << (h % 7));
}

SyntheticState::SyntheticState(const ModelConfig& c, const mesh::Mesh& m, int rank, uint64_t salt)
    : mesh_(m), rank_(rank), salt_(salt) {
  auto add = [&](const std::string& name, const Shape& shape, const mesh::TensorLayout& l) {
    const auto idx = mesh::global_indices(m, l, shape, rank);
    Tensor<double>& t = f64_.emplace_back(mesh::local_shape(m, l, shape, rank));
    for (size_t i = 0; i < idx.size(); ++i) t.data[i] = value(name, idx[i], salt);
    state_.add(name, shape, l, t);
  };
  const auto specs = param_specs(c);
  for (const auto& p : specs) add(p.name, p.shape, mesh::param_layout(m, p));
  for (const char* which : {"optim.m.", "optim.v."})
    for (const auto& p : specs) add(which + p.name, p.shape, mesh::param_layout(m, p));
  for (int64_t l = c.dense_layers; l < c.layers; ++l)
    add("expert_bias.layers." + std::to_string(l), {c.experts}, mesh::replicated(mesh::View::dense));
  Tensor<int64_t>& step = i64_.emplace_back(Shape{});
  step.data[0] = static_cast<int64_t>(salt) * 1000 + 7;
  state_.add("optim.step", {}, mesh::replicated(mesh::View::dense), step);
}

void SyntheticState::scramble() {
  for (auto& t : f64_) t = Tensor<double>({1}, std::vector<double>{12345.678});
  for (auto& t : i64_) t = Tensor<int64_t>({1}, std::vector<int64_t>{-1});
}

int64_t SyntheticState::wrong() const {
  int64_t bad = 0;
  for (const StateEntry& e : state_.entries()) {
    const Shape want = mesh::local_shape(mesh_, e.layout, e.shape, rank_);
    if (e.local_shape() != want) {
      bad += numel(want) + 1;
      continue;
    }
    const auto idx = mesh::global_indices(mesh_, e.layout, e.shape, rank_);
    if (e.dtype == DType::i64) {
      bad += *static_cast<const int64_t*>(e.data()) != static_cast<int64_t>(salt_) * 1000 + 7;
      continue;
    }
    const auto* d = static_cast<const double*>(e.data());
    for (size_t i = 0; i < idx.size(); ++i) {
      const double v = value(e.name, idx[i], salt_);
      bad += std::memcmp(&d[i], &v, sizeof v) != 0;
    }
  }
  return bad;
}

int64_t SyntheticState::bytes() const {
  int64_t n = 0;
  for (const auto& t : f64_) n += t.numel() * 8;
  for (const auto& t : i64_) n += t.numel() * 8;
  return n;
}

}  // namespace parity::ckpt
