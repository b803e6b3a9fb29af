// Properties of the shard math over random meshes (W up to 8, any factorisation), random
// shapes (dimensions 0 to 9, so shards are often uneven or empty) and random layouts.
// redistribute's routing is checked here with every rank simulated in one process; the
// same property across real ranks is mesh_worker's (mesh_multiproc_test.cpp).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>

#include "mesh/redistribute.h"
#include "mesh/shard.h"
#include "mesh_gen.h"

namespace parity::mesh {
namespace {

using testing::draw_layout;
using testing::draw_layout_config;
using testing::draw_shape;

void classify(const Mesh& m, const TensorLayout& l, const Shape& shape) {
  RC_CLASSIFY(has_uneven_shards(m, l, shape), "uneven shards");
  RC_CLASSIFY(has_empty_shards(m, l, shape), "empty shards");
  bool strided = false;
  for (const Placement& p : l.placements) strided = strided || p.kind == PlacementKind::strided_shard;
  RC_CLASSIFY(strided, "StridedShard");
  const LayoutConfig& c = m.layout();
  RC_CLASSIFY(c.order == RankOrder::deepspeed && c.tp > 1 && c.dp_shard > 1, "deepspeed order (other groups)");
  RC_CLASSIFY(c.etp != 1 && c.etp != c.tp, "etp not 1 or tp");
  RC_CLASSIFY(testing::uses_flat_rule(m, l), "nested StridedShard, segments do not divide");
  RC_CLASSIFY(m.size(MeshDim::cp) > 1, "cp > 1");
  RC_CLASSIFY(c.order == RankOrder::deepspeed && c.cp > 1, "deepspeed order with cp > 1");
}

RC_GTEST_PROP(MeshProps, AssembleOfShardIsBitwiseTheTensor, ()) {
  const Mesh m(draw_layout_config(testing::draw_world()));
  const Shape shape = draw_shape();
  const TensorLayout l = draw_layout(m, shape);
  classify(m, l, shape);
  const Tensor<double> x = testing::pattern<double>(shape, 3);
  std::vector<Tensor<double>> locals;
  for (int r = 0; r < m.world(); ++r) {
    locals.push_back(shard(m, l, x, r));
    RC_ASSERT(locals.back().shape == local_shape(m, l, shape, r));
  }
  const Tensor<double> back = assemble(m, l, shape, locals);
  RC_ASSERT(back.shape == shape);
  RC_ASSERT(testing::same_bits(back.data, x.data));
}

RC_GTEST_PROP(MeshProps, EveryElementIsHeldByAsManyRanksAsTheLayoutReplicatesIt, ()) {
  const Mesh m(draw_layout_config(testing::draw_world()));
  const Shape shape = draw_shape();
  const TensorLayout l = draw_layout(m, shape);
  classify(m, l, shape);
  std::vector<int64_t> held(static_cast<size_t>(numel(shape)), 0);
  const Tensor<int64_t> x = testing::pattern<int64_t>(shape, 0);
  for (int r = 0; r < m.world(); ++r) {
    const std::vector<int64_t> idx = global_indices(m, l, shape, r);
    const Tensor<int64_t> local = shard(m, l, x, r);
    RC_ASSERT(static_cast<int64_t>(idx.size()) == numel(local_shape(m, l, shape, r)));
    for (size_t i = 0; i < idx.size(); ++i) {
      ++held[static_cast<size_t>(idx[i])];
      // The local element i is global element idx[i] (or the Partial identity off the root).
      RC_ASSERT(local.data[i] == (partial_root(m, l, r) ? x.data[static_cast<size_t>(idx[i])] : 0));
    }
  }
  for (int64_t h : held) RC_ASSERT(h == replication(m, l));
}

// FOLDINGS.md's definition: split d into sf chunks, each into n pieces, rank i holds piece i
// of every chunk, concatenated. The strided dimension is the first to shard d; the mesh
// dimensions to its right that shard d split its local part further, so concatenating
// their locals in rank order gives back piece i of every chunk. Even case: the formula
// owner = r div b, local index j·b + r mod b with b = N / (sf·n).
RC_GTEST_PROP(MeshProps, StridedShardAgreesWithItsDefinition, ()) {
  const Mesh m(draw_layout_config(testing::draw_world()));
  const View v = *rc::gen::elementOf(std::vector<View>{View::dense, View::expert});
  const auto& dims = view_dims(v);
  const std::vector<int64_t> sizes = m.sizes(v);
  const size_t at = *rc::gen::inRange<size_t>(0, dims.size());
  const int64_t N = *rc::gen::inRange<int64_t>(0, 25);
  TensorLayout l{v, std::vector<Placement>(dims.size(), Placement::replicate())};
  std::vector<MeshDim> right;
  int64_t right_size = 1;
  for (size_t k = at + 1; k < dims.size(); ++k)
    if (*rc::gen::arbitrary<bool>()) {
      l.placements[k] = Placement::shard(0);
      right.push_back(dims[k]);
      right_size *= sizes[k];
    }
  const int64_t sf = right.empty() ? *rc::gen::inRange<int64_t>(1, 5) : right_size;
  l.placements[at] = Placement::strided_shard(0, sf);
  const int64_t n = sizes[at];
  RC_CLASSIFY(N % (sf * n) != 0, "uneven");
  RC_CLASSIFY(!right.empty(), "sharded further to the right");
  for (int r = 0; r < m.world(); ++r) {
    const int64_t c = m.coords(v, r)[at];
    std::vector<int64_t> want;
    for (int64_t j = 0; j < sf; ++j) {
      const Range ch = chunk(N, sf, j), piece = chunk(ch.size(), n, c);
      for (int64_t g = ch.begin + piece.begin; g < ch.begin + piece.end; ++g) want.push_back(g);
    }
    std::vector<int64_t> got;
    for (int q : m.group_over(v, right, r)) {
      const auto idx = local_dim_indices(m, l, {N}, q)[0];
      got.insert(got.end(), idx.begin(), idx.end());
    }
    RC_ASSERT(got == want);
    if (N % (sf * n) != 0) continue;
    const int64_t b = N / (sf * n);
    for (size_t p = 0; p < want.size(); ++p) {
      const int64_t g = want[p], j = g / (N / sf), rr = g % (N / sf);
      RC_ASSERT(rr / b == c);
      RC_ASSERT(j * b + rr % b == static_cast<int64_t>(p));
    }
  }
}

// DTensor's rule, restated independently (test_utils.py's semantics): each placement on d
// picks positions of the current local index list; Shard piece c of n, StridedShard(sf)
// piece c of each of sf chunks. The segment rule and this agree on a dimension's first
// placement, so a layout whose second placement on d already does not divide follows this
// oracle all the way.
std::vector<int64_t> dtensor_indices(const Mesh& m, const TensorLayout& l, int64_t d, int64_t len, int rank) {
  std::vector<int64_t> idx;
  for (int64_t g = 0; g < len; ++g) idx.push_back(g);
  const std::vector<int64_t> sizes = m.sizes(l.view), coords = m.coords(l.view, rank);
  for (size_t i = 0; i < l.placements.size(); ++i) {
    const Placement& p = l.placements[i];
    if (!p.is_shard() || p.dim != d) continue;
    const int64_t sf = p.kind == PlacementKind::strided_shard ? p.split_factor : 1;
    std::vector<int64_t> next;
    const auto n_idx = static_cast<int64_t>(idx.size());
    for (int64_t j = 0; j < sf; ++j) {
      const int64_t c1 = (n_idx + sf - 1) / sf, b = std::min(j * c1, n_idx), e = std::min(b + c1, n_idx);
      const int64_t c2 = (e - b + sizes[i] - 1) / sizes[i];
      const int64_t pb = std::min(b + coords[i] * c2, e), pe = std::min(b + (coords[i] + 1) * c2, e);
      for (int64_t q = pb; q < pe; ++q) next.push_back(idx[static_cast<size_t>(q)]);
    }
    idx = std::move(next);
  }
  return idx;
}

RC_GTEST_PROP(MeshProps, NestedStridedShardWithAnyFactorsFollowsDTensor, ()) {
  const Mesh m(draw_layout_config(*rc::gen::elementOf(std::vector<int64_t>{4, 6, 8})));
  const View v = *rc::gen::elementOf(std::vector<View>{View::dense, View::expert});
  const std::vector<int64_t> sizes = m.sizes(v);
  std::vector<size_t> big;  // mesh dimensions of size > 1
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 1) big.push_back(i);
  RC_PRE(big.size() >= 2);
  const size_t a = big[0], b = big[1];
  TensorLayout l{v, std::vector<Placement>(sizes.size(), Placement::replicate())};
  const int64_t sf1 = *rc::gen::inRange<int64_t>(2, 6);
  l.placements[a] = Placement::strided_shard(0, sf1);
  l.placements[b] = *rc::gen::arbitrary<bool>() ? Placement::shard(0)
                                                : Placement::strided_shard(0, *rc::gen::inRange<int64_t>(1, 6));
  for (size_t k = b + 1; k < sizes.size(); ++k)
    if (*rc::gen::arbitrary<bool>()) l.placements[k] = Placement::shard(0);
  RC_PRE(testing::uses_flat_rule(
      m, TensorLayout{v, {l.placements.begin(), l.placements.begin() + static_cast<long>(b) + 1}}));
  const int64_t N = *rc::gen::inRange<int64_t>(0, 40);
  RC_CLASSIFY(l.placements[b].kind == PlacementKind::strided_shard, "StridedShard after StridedShard");
  RC_CLASSIFY(has_empty_shards(m, l, {N, 2}), "empty shards");
  for (int r = 0; r < m.world(); ++r) {
    RC_ASSERT(local_dim_indices(m, l, {N, 2}, r)[0] == dtensor_indices(m, l, 0, N, r));
    const auto off = global_offset(m, l, {N, 2}, r);
    const auto want = dtensor_indices(m, l, 0, N, r);
    RC_ASSERT(off[0] == (want.empty() ? N : want.front()));
  }
  const Tensor<double> x = testing::pattern<double>({N, 2}, 9);
  std::vector<Tensor<double>> locals;
  for (int r = 0; r < m.world(); ++r) locals.push_back(shard(m, l, x, r));
  RC_ASSERT(testing::same_bits(assemble(m, l, {N, 2}, locals).data, x.data));
}

// Every rank's plan, carried out in one process: the elements sent by each rank arrive
// where the receiver's plan puts them, and the result is shard_B(x).
RC_GTEST_PROP(MeshProps, RedistributePlanMovesShardAToShardB, ()) {
  const LayoutConfig cfg = draw_layout_config(testing::draw_world());
  const Mesh m(cfg);
  const Shape shape = draw_shape();
  const TensorLayout a = draw_layout(m, shape), b = draw_layout(m, shape);
  classify(m, a, shape);
  RC_LOG() << testing::describe(cfg, shape, a, b) << "\n";
  const Tensor<double> x = testing::pattern<double>(shape, 5);
  std::vector<Tensor<double>> locals;
  for (int r = 0; r < m.world(); ++r) locals.push_back(shard(m, a, x, r));
  locals = reduce_partials(m, a, locals);
  const auto W = static_cast<size_t>(m.world());
  std::vector<RedistributePlan> plans;
  for (int r = 0; r < m.world(); ++r) plans.push_back(plan_redistribute(m, shape, a, b, r));
  // (sender, receiver) -> the values in send order
  std::map<std::pair<size_t, size_t>, std::vector<double>> wire;
  for (size_t s = 0; s < W; ++s) {
    size_t k = 0;
    for (size_t r = 0; r < W; ++r)
      for (int64_t i = 0; i < plans[s].send_counts[r]; ++i, ++k)
        wire[{s, r}].push_back(locals[s].data[static_cast<size_t>(plans[s].send_pos[k])]);
  }
  for (size_t r = 0; r < W; ++r) {
    Tensor<double> out(local_shape(m, b, shape, static_cast<int>(r)));
    size_t k = 0;
    for (size_t s = 0; s < W; ++s) {
      RC_ASSERT(plans[r].recv_counts[s] == plans[s].send_counts[r]);
      for (double v : wire[{s, r}]) out.data[static_cast<size_t>(plans[r].recv_pos[k++])] = v;
    }
    if (!partial_root(m, b, static_cast<int>(r))) std::fill(out.data.begin(), out.data.end(), -0.0);
    RC_ASSERT(testing::same_bits(out.data, shard(m, b, x, static_cast<int>(r)).data));
  }
}

}  // namespace
}  // namespace parity::mesh
