#include "mesh/shard.h"

#include <cstring>

#include "core/error.h"

namespace parity::mesh {

TensorLayout partials_resolved(const TensorLayout& l) {
  TensorLayout out = l;
  for (Placement& p : out.placements)
    if (p.kind == PlacementKind::partial) p = Placement::replicate();
  return out;
}

template <class T> Tensor<T> shard(const Mesh& m, const TensorLayout& l, const Tensor<T>& global, int rank) {
  if (global.numel() != numel(global.shape))
    throw Error("shard: tensor of shape " + shape_str(global.shape) + " holds " + std::to_string(global.numel()) +
                " elements");
  Tensor<T> local(local_shape(m, l, global.shape, rank));
  const std::vector<int64_t> idx = global_indices(m, l, global.shape, rank);
  if (!partial_root(m, l, rank)) {
    std::fill(local.data.begin(), local.data.end(), additive_identity<T>());
    return local;
  }
  for (size_t i = 0; i < idx.size(); ++i) local.data[i] = global.data[static_cast<size_t>(idx[i])];
  return local;
}

template <class T>
std::vector<Tensor<T>> reduce_partials(const Mesh& m, const TensorLayout& l, std::vector<Tensor<T>> locals) {
  const auto& dims = view_dims(l.view);
  for (size_t i = 0; i < l.placements.size(); ++i) {
    if (l.placements[i].kind != PlacementKind::partial) continue;
    std::vector<bool> done(static_cast<size_t>(m.world()), false);
    for (int r = 0; r < m.world(); ++r) {
      if (done[static_cast<size_t>(r)]) continue;
      const Group g = m.group_over(l.view, {dims[i]}, r);  // ascending rank = coordinate order
      Tensor<T> acc = locals[static_cast<size_t>(g[0])];
      for (size_t k = 1; k < g.size(); ++k) {
        const Tensor<T>& x = locals[static_cast<size_t>(g[k])];
        if (x.data.size() != acc.data.size())
          throw Error("reduce_partials: ranks " + std::to_string(g[0]) + " and " + std::to_string(g[k]) +
                      " hold addends of different sizes");
        for (size_t e = 0; e < acc.data.size(); ++e) acc.data[e] += x.data[e];
      }
      for (int member : g) {
        locals[static_cast<size_t>(member)] = acc;
        done[static_cast<size_t>(member)] = true;
      }
    }
  }
  return locals;
}

template <class T>
Tensor<T> assemble(const Mesh& m, const TensorLayout& l, const Shape& shape, const std::vector<Tensor<T>>& locals,
                   Replicas replicas) {
  check_layout(m, l, shape);
  if (locals.size() != static_cast<size_t>(m.world()))
    throw Error("assemble: " + std::to_string(locals.size()) + " local tensors for a world of " +
                std::to_string(m.world()));
  for (int r = 0; r < m.world(); ++r)
    if (locals[static_cast<size_t>(r)].shape != local_shape(m, l, shape, r) ||
        locals[static_cast<size_t>(r)].numel() != numel(locals[static_cast<size_t>(r)].shape))
      throw Error("assemble: rank " + std::to_string(r) + " holds shape " +
                  shape_str(locals[static_cast<size_t>(r)].shape) + ", the layout " + layout_str(l) + " gives " +
                  shape_str(local_shape(m, l, shape, r)));
  const std::vector<Tensor<T>> summed = reduce_partials(m, l, locals);
  const TensorLayout plain = partials_resolved(l);
  Tensor<T> out(shape);
  std::vector<int> holder(static_cast<size_t>(out.numel()), -1);
  for (int r = 0; r < m.world(); ++r) {
    const std::vector<int64_t> idx = global_indices(m, plain, shape, r);
    const Buffer<T>& x = summed[static_cast<size_t>(r)].data;
    for (size_t i = 0; i < idx.size(); ++i) {
      const size_t g = static_cast<size_t>(idx[i]);
      if (holder[g] < 0) {
        holder[g] = r;
        out.data[g] = x[i];
      } else if (replicas == Replicas::must_agree && std::memcmp(&out.data[g], &x[i], sizeof(T)) != 0) {
        throw Error("assemble: element " + std::to_string(g) + " of " + shape_str(shape) + " differs between rank " +
                    std::to_string(holder[g]) + " and rank " + std::to_string(r) + " under " + layout_str(l));
      }
    }
  }
  for (size_t g = 0; g < holder.size(); ++g)
    if (holder[g] < 0) throw Error("assemble: no rank holds element " + std::to_string(g) + " under " + layout_str(l));
  return out;
}

#define PARITY_MESH_SHARD(T)                                                                                 \
  template Tensor<T> shard<T>(const Mesh&, const TensorLayout&, const Tensor<T>&, int);                            \
  template std::vector<Tensor<T>> reduce_partials<T>(const Mesh&, const TensorLayout&, std::vector<Tensor<T>>);    \
  template Tensor<T> assemble<T>(const Mesh&, const TensorLayout&, const Shape&, const std::vector<Tensor<T>>&,    \
                                 Replicas);
PARITY_MESH_SHARD(float)
PARITY_MESH_SHARD(double)
PARITY_MESH_SHARD(int64_t)
#undef PARITY_MESH_SHARD

}  // namespace parity::mesh
