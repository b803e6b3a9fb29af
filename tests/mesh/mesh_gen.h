// RapidCheck generators for meshes, shapes and layouts, shared by the in-process property
// tests (test_mesh) and the rank processes of the multi-process test (mesh_worker).
// Call them inside a property: they draw with `*gen`.
#pragma once
#include <rapidcheck.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "mesh/mesh.h"
#include "mesh/placement.h"
#include "mesh/layout_config.h"

namespace parity::mesh::testing {

inline std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// W from 1 to 8, weighted towards the worlds with many factorisations.
inline int64_t draw_world() {
  return *rc::gen::weightedOneOf<int64_t>({{1, rc::gen::inRange<int64_t>(1, 9)},
                                           {2, rc::gen::elementOf(std::vector<int64_t>{4, 6, 8})}});
}

// Any factorisation of `world` into both views (every etp that tiles), in either rank order.
inline LayoutConfig draw_layout_config(int64_t world) {
  LayoutConfig l;
  l.world = world;
  l.dp_replicate = *rc::gen::elementOf(divisors(world));
  l.dp_shard = *rc::gen::elementOf(divisors(world / l.dp_replicate));
  l.cp = *rc::gen::elementOf(divisors(world / (l.dp_replicate * l.dp_shard)));
  l.tp = world / (l.dp_replicate * l.dp_shard * l.cp);
  const int64_t rest = world / l.dp_replicate;
  l.ep = *rc::gen::elementOf(divisors(rest));
  l.etp = *rc::gen::elementOf(divisors(rest / l.ep));
  l.order = *rc::gen::elementOf(std::vector<RankOrder>{RankOrder::megatron, RankOrder::deepspeed});
  return l;
}

// Rank 0 to 3; lengths 0 to 9, mostly small so that shards are often uneven or empty.
inline Shape draw_shape() {
  const int64_t rank =
      *rc::gen::weightedOneOf<int64_t>({{1, rc::gen::just<int64_t>(0)}, {6, rc::gen::inRange<int64_t>(1, 4)}});
  Shape s;
  for (int64_t d = 0; d < rank; ++d)
    s.push_back(*rc::gen::weightedOneOf<int64_t>({{1, rc::gen::just<int64_t>(0)},
                                                   {8, rc::gen::inRange<int64_t>(1, 6)},
                                                   {3, rc::gen::inRange<int64_t>(6, 10)}}));
  return s;
}

// Product of the sizes of the mesh dimensions right of i that shard tensor dimension d.
inline int64_t right_product(const std::vector<int64_t>& sizes, const std::vector<Placement>& ps, size_t i,
                             int64_t d) {
  int64_t p = 1;
  for (size_t k = i + 1; k < ps.size(); ++k)
    if (ps[k].is_shard() && ps[k].dim == d) p *= sizes[k];
  return p;
}

// A random layout in a random view: Replicate, Shard, Partial per mesh dimension; some
// shards become StridedShard with the usual split factor (the product of the sizes to the
// right sharding the same dimension) or, two times in three, any factor 1..4 (nested
// StridedShard whose segment counts need not divide: DTensor's flat rule), and a
// dimension's only shard may take any factor.
inline TensorLayout draw_layout(const Mesh& m, const Shape& shape, View v) {
  const std::vector<int64_t> sizes = m.sizes(v);
  const auto rank = static_cast<int64_t>(shape.size());
  TensorLayout l{v, {}};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int kind = *rc::gen::weightedOneOf<int>(
        {{2, rc::gen::just(0)}, {rank > 0 ? 7 : 0, rc::gen::just(1)}, {1, rc::gen::just(2)}});
    if (kind == 1) l.placements.push_back(Placement::shard(*rc::gen::inRange<int64_t>(0, rank)));
    else l.placements.push_back(kind == 2 ? Placement::partial() : Placement::replicate());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    Placement& p = l.placements[i];
    if (!p.is_shard() || !*rc::gen::arbitrary<bool>()) continue;
    int64_t sharders = 0;
    for (const Placement& q : l.placements) sharders += q.is_shard() && q.dim == p.dim;
    const bool any =
        sharders == 1 || *rc::gen::weightedOneOf<bool>({{1, rc::gen::just(false)}, {2, rc::gen::just(true)}});
    const int64_t sf = any ? *rc::gen::inRange<int64_t>(1, 5) : right_product(sizes, l.placements, i, p.dim);
    p = Placement::strided_shard(p.dim, sf);
  }
  return l;
}

// Whether some tensor dimension meets a segment count that does not divide (placement.h):
// from there on it follows DTensor's flat rule. The segment counting of placement.cpp,
// restated: a first shard leaves sf segments (1 for Shard), Shard over n keeps s / n when n
// divides s, StridedShard keeps sf when s = sf * n.
inline bool uses_flat_rule(const Mesh& m, const TensorLayout& l) {
  const std::vector<int64_t> sizes = m.sizes(l.view);
  for (int64_t d = 0; d < 64; ++d) {
    int64_t s = 1;
    for (size_t i = 0; i < l.placements.size(); ++i) {
      const Placement& p = l.placements[i];
      if (!p.is_shard() || p.dim != d) continue;
      const bool strided = p.kind == PlacementKind::strided_shard;
      if (s == 1) s = strided ? p.split_factor : 1;
      else if (!strided && s % sizes[i] == 0) s /= sizes[i];
      else if (strided && s == p.split_factor * sizes[i]) s = p.split_factor;
      else return true;
    }
  }
  return false;
}

inline TensorLayout draw_layout(const Mesh& m, const Shape& shape) {
  return draw_layout(m, shape, *rc::gen::elementOf(std::vector<View>{View::dense, View::expert}));
}

// Distinct values, with -0.0 at every 7th element so that bitwise equality is tested.
template <class T> Tensor<T> pattern(const Shape& s, int64_t salt) {
  Tensor<T> t(s);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if constexpr (std::is_floating_point_v<T>)
      t.data[static_cast<size_t>(i)] = i % 7 == 3 ? T(-0.0) : T(static_cast<double>(i * 131 + salt) / 8.0 + 0.125);
    else
      t.data[static_cast<size_t>(i)] = i * 131 + salt;
  }
  return t;
}

template <class A, class B> bool same_bits(const A& a, const B& b) {
  using T = typename A::value_type;
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// The case as a scenario "layout" object plus the tensor's shape and layouts, for replay.
inline std::string describe(const LayoutConfig& c, const Shape& shape, const TensorLayout& a, const TensorLayout& b) {
  auto i = [](int64_t v) { return std::to_string(v); };
  return "\"layout\": {\"world\": " + i(c.world) + ", \"dp_replicate\": " + i(c.dp_replicate) +
         ", \"dp_shard\": " + i(c.dp_shard) + ", \"tp\": " + i(c.tp) + ", \"ep\": " + i(c.ep) +
         ", \"etp\": " + i(c.etp) + ", \"order\": \"" + std::string(order_name(c.order)) + "\"}; shape " +
         shape_str(shape) + "; from " + std::string(view_name(a.view)) + " " + layout_str(a) + "; to " +
         std::string(view_name(b.view)) + " " + layout_str(b);
}

}  // namespace parity::mesh::testing
