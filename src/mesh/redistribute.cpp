#include "mesh/redistribute.h"

#include <numeric>
#include <span>

#include "core/error.h"
#include "mesh/shard.h"

namespace parity::mesh {

namespace {

// For one tensor dimension under a layout without Partial: for every global index g along
// it, the part of the holder's linear index (Mesh::linear) that the dimensions sharding it
// contribute, the
// position of g in the holder's local list, and that list's length.
struct DimOwners {
  std::vector<int64_t> rank_part, pos, extent;
};

std::vector<int64_t> rank_strides(const Mesh& m, View v) {
  const std::vector<int64_t> sizes = m.sizes(v);
  std::vector<int64_t> st(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) st[i - 1] = st[i] * sizes[i];
  return st;
}

std::vector<DimOwners> dim_owners(const Mesh& m, const TensorLayout& l, const Shape& shape) {
  const std::vector<int64_t> st = rank_strides(m, l.view);
  std::vector<DimOwners> out(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    const auto n = static_cast<size_t>(shape[d]);
    out[d] = {std::vector<int64_t>(n, -1), std::vector<int64_t>(n, -1), std::vector<int64_t>(n, 0)};
  }
  for (int r = 0; r < m.world(); ++r) {
    const std::vector<int64_t> c = m.coords(l.view, r);
    const auto idx = local_dim_indices(m, l, shape, r);
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t part = 0;
      for (size_t i = 0; i < l.placements.size(); ++i)
        if (l.placements[i].is_shard() && l.placements[i].dim == static_cast<int64_t>(d)) part += c[i] * st[i];
      for (size_t p = 0; p < idx[d].size(); ++p) {
        const auto g = static_cast<size_t>(idx[d][p]);
        out[d].rank_part[g] = part;
        out[d].pos[g] = static_cast<int64_t>(p);
        out[d].extent[g] = static_cast<int64_t>(idx[d].size());
      }
    }
  }
  return out;
}

// The part of a receiver's rank on the dimensions of `l` that shard nothing.
int64_t free_base(const Mesh& m, const TensorLayout& l, int rank) {
  const std::vector<int64_t> st = rank_strides(m, l.view), c = m.coords(l.view, rank);
  int64_t base = 0;
  for (size_t i = 0; i < l.placements.size(); ++i)
    if (!l.placements[i].is_shard()) base += c[i] * st[i];
  return base;
}

// Calls f(source rank, position in the source's local) for each element of `rank`'s local
// tensor under `to`, in local row-major order.
template <class F>
void for_each_needed(const Mesh& m, const Shape& shape, const TensorLayout& from, const std::vector<DimOwners>& own,
                     const TensorLayout& to, int rank, F&& f) {
  const auto idx = local_dim_indices(m, to, shape, rank);
  for (const auto& v : idx)
    if (v.empty()) return;
  const int64_t base = free_base(m, from, rank);
  const size_t k = shape.size();
  std::vector<size_t> it(k, 0);
  while (true) {
    int64_t src = base, pos = 0, stride = 1;
    for (size_t d = k; d-- > 0;) {
      const auto g = static_cast<size_t>(idx[d][it[d]]);
      src += own[d].rank_part[g];
      pos += own[d].pos[g] * stride;
      stride *= own[d].extent[g];
    }
    f(m.rank_at(from.view, src), pos);  // src is a linear index of from.view: the rank order maps it
    size_t d = k;
    while (d > 0 && ++it[d - 1] == idx[d - 1].size()) it[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

RedistributePlan plan_redistribute(const Mesh& m, const Shape& shape, const TensorLayout& from, const TensorLayout& to,
                                   int rank) {
  check_layout(m, from, shape);
  check_layout(m, to, shape);
  const TensorLayout src = partials_resolved(from);
  const std::vector<DimOwners> own = dim_owners(m, src, shape);
  const auto W = static_cast<size_t>(m.world());
  RedistributePlan p{std::vector<int64_t>(W, 0), std::vector<int64_t>(W, 0), {}, {}};
  std::vector<std::vector<int64_t>> recv_by_src(W);
  int64_t q = 0;
  for_each_needed(m, shape, src, own, to, rank, [&](int s, int64_t) {
    recv_by_src[static_cast<size_t>(s)].push_back(q++);
  });
  for (size_t s = 0; s < W; ++s) {
    p.recv_counts[s] = static_cast<int64_t>(recv_by_src[s].size());
    p.recv_pos.insert(p.recv_pos.end(), recv_by_src[s].begin(), recv_by_src[s].end());
  }
  for (int r = 0; r < m.world(); ++r)
    for_each_needed(m, shape, src, own, to, r, [&](int s, int64_t pos) {
      if (s != rank) return;
      p.send_pos.push_back(pos);
      ++p.send_counts[static_cast<size_t>(r)];
    });
  return p;
}

namespace {

// Step (1): sums the addends of each Partial dimension of `from` over its group.
template <comm::CommElement T>
Buffer<T> sum_partials(comm::Communicator& world, const Mesh& m, const TensorLayout& from, Buffer<T> x) {
  const auto& dims = view_dims(from.view);
  for (size_t i = 0; i < from.placements.size(); ++i) {
    if (from.placements[i].kind != PlacementKind::partial) continue;
    const Group g = m.group_over(from.view, {dims[i]}, world.rank());
    if (g.size() == 1 || x.empty()) continue;
    comm::Communicator& c = world.group(g);
    Buffer<T> all(x.size() * g.size());
    c.allgather(std::span<const T>(x), std::span<T>(all));
    Buffer<T> acc(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(x.size()));
    for (size_t k = 1; k < g.size(); ++k)
      for (size_t e = 0; e < acc.size(); ++e) acc[e] += all[k * x.size() + e];
    x = std::move(acc);
  }
  return x;
}

}  // namespace

template <comm::CommElement T>
Tensor<T> redistribute(comm::Communicator& world, const Mesh& m, const Shape& shape, const TensorLayout& from,
                       const Tensor<T>& local, const TensorLayout& to) {
  if (world.size() != m.world() || world.members().front() != 0)
    throw CommError("redistribute: needs the world communicator of " + std::to_string(m.world()) + " ranks, got " +
                    world.name() + " of " + std::to_string(world.size()));
  const int me = world.rank();
  const Shape want = local_shape(m, from, shape, me);
  if (local.shape != want || local.numel() != numel(want))
    throw Error("redistribute: rank " + std::to_string(me) + " holds shape " + shape_str(local.shape) + ", " +
                layout_str(from) + " gives " + shape_str(want));
  const Buffer<T> x = sum_partials(world, m, from, local.data);
  const RedistributePlan p = plan_redistribute(m, shape, from, to, me);
  std::vector<T> send(p.send_pos.size()), recv(p.recv_pos.size());
  for (size_t i = 0; i < send.size(); ++i) send[i] = x[static_cast<size_t>(p.send_pos[i])];
  world.alltoallv(std::span<const T>(send), std::span<const int64_t>(p.send_counts), std::span<T>(recv),
                  std::span<const int64_t>(p.recv_counts));
  Tensor<T> out(local_shape(m, to, shape, me));
  if (!partial_root(m, to, me)) {
    std::fill(out.data.begin(), out.data.end(), additive_identity<T>());
    return out;
  }
  for (size_t i = 0; i < recv.size(); ++i) out.data[static_cast<size_t>(p.recv_pos[i])] = recv[i];
  return out;
}

template Tensor<float> redistribute<float>(comm::Communicator&, const Mesh&, const Shape&, const TensorLayout&,
                                           const Tensor<float>&, const TensorLayout&);
template Tensor<double> redistribute<double>(comm::Communicator&, const Mesh&, const Shape&, const TensorLayout&,
                                             const Tensor<double>&, const TensorLayout&);
template Tensor<int64_t> redistribute<int64_t>(comm::Communicator&, const Mesh&, const Shape&, const TensorLayout&,
                                               const Tensor<int64_t>&, const TensorLayout&);

}  // namespace parity::mesh
