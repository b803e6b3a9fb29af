// PyTorch's own expectations for DTensor placements, held as literal numbers: the cases of
// test/distributed/tensor/test_utils.py (LocalTest.test_compute_local_shape_and_global_offset_uneven,
// UtilTest.test_fsdp_tp_meta_compute, test_uneven_fsdp_tp_meta_compute), each (local size
// along dim 0, global offset along dim 0) per mesh coordinate, written out by hand from the
// test's own expected values. parity's mesh (dp_replicate, dp_shard, tp) plays PyTorch's
// (DP, TP) mesh with dp_replicate 1, and (mesh0, mesh1, mesh2) with all three.
// Also: nested StridedShard whose segment counts do not divide (refused before issue 17),
// worked by hand with DTensor's rule, and the local index ranges explain prints.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "mesh/placement.h"
#include "mesh/shard.h"

namespace parity::mesh::dtensor_expect_test {  // one namespace per file: the tests build as unity batches
namespace {

using P = Placement;
using SizeOffset = std::pair<int64_t, int64_t>;

LayoutConfig mesh3(int64_t a, int64_t b, int64_t c) {
  LayoutConfig l;
  l.world = a * b * c;
  l.dp_replicate = a;
  l.dp_shard = b;
  l.tp = c;
  return l;
}

// (size, offset) along dim 0 of every rank, in rank order (the last mesh dimension fastest,
// as PyTorch's itertools.product over the mesh coordinates).
std::vector<SizeOffset> size_offsets(const Mesh& m, const TensorLayout& l, const Shape& shape) {
  std::vector<SizeOffset> out;
  for (int r = 0; r < m.world(); ++r)
    out.emplace_back(local_shape(m, l, shape, r)[0], global_offset(m, l, shape, r)[0]);
  return out;
}

// On PyTorch's 2-D (DP, TP) mesh.
std::vector<SizeOffset> on_dp_tp(int64_t dp, int64_t tp, P a, P b, const Shape& shape) {
  const Mesh m(mesh3(1, dp, tp));
  return size_offsets(m, {View::dense, {P::replicate(), a, P::replicate(), b}}, shape);
}

TEST(DTensorExpectations, ShardShardUnevenWithoutEmpty) {  // global (18, 2), DP 4, TP 2
  const std::vector<SizeOffset> want = {{3, 0}, {2, 3}, {3, 5}, {2, 8}, {3, 10}, {2, 13}, {2, 15}, {1, 17}};
  EXPECT_EQ(on_dp_tp(4, 2, P::shard(0), P::shard(0), {18, 2}), want);
}

TEST(DTensorExpectations, ShardShardUnevenWithEmpty) {  // global (13, 2): the empty shard's offset is 13
  const std::vector<SizeOffset> want = {{2, 0}, {2, 2}, {2, 4}, {2, 6}, {2, 8}, {2, 10}, {1, 12}, {0, 13}};
  EXPECT_EQ(on_dp_tp(4, 2, P::shard(0), P::shard(0), {13, 2}), want);
}

TEST(DTensorExpectations, StridedShardThenShard) {  // global (18, 2), [_StridedShard(0, 2), Shard(0)]
  const std::vector<SizeOffset> want = {{3, 0}, {3, 9}, {3, 3}, {3, 12}, {3, 6}, {3, 15}, {0, 18}, {0, 18}};
  EXPECT_EQ(on_dp_tp(4, 2, P::strided_shard(0, 2), P::shard(0), {18, 2}), want);
}

// [_StridedShard(0, 3), _StridedShard(0, 4)] on (39, 2): 3 segments meet a StridedShard of
// 4 x 2, which do not divide; the old rule refused this layout.
TEST(DTensorExpectations, StridedShardThenStridedShardWithOtherFactors) {
  const std::vector<SizeOffset> want = {{8, 0}, {4, 2}, {8, 4}, {4, 6}, {8, 8}, {4, 10}, {3, 12}, {0, 39}};
  EXPECT_EQ(on_dp_tp(4, 2, P::strided_shard(0, 3), P::strided_shard(0, 4), {39, 2}), want);
}

TEST(DTensorExpectations, ShardThenStridedShard) {  // global (18, 2), [Shard(0), _StridedShard(0, 2)]
  const std::vector<SizeOffset> want = {{3, 0}, {2, 2}, {3, 5}, {2, 7}, {3, 10}, {2, 12}, {2, 15}, {1, 16}};
  EXPECT_EQ(on_dp_tp(4, 2, P::shard(0), P::strided_shard(0, 2), {18, 2}), want);
}

// [Shard(0), _StridedShard(0, 2), Shard(0)] on mesh (4, 2, 3), global (39, 2): 2 segments
// meet a Shard over 3 (refused before).
TEST(DTensorExpectations, ShardStridedShardShardOnThreeMeshDims) {
  const Mesh m(mesh3(4, 2, 3));
  const TensorLayout l{View::dense, {P::shard(0), P::strided_shard(0, 2), P::replicate(), P::shard(0)}};
  const std::vector<SizeOffset> want = {
      {2, 0},  {2, 2},  {2, 6},  {2, 3},  {2, 8},  {0, 39},   // mesh0 0
      {2, 10}, {2, 12}, {2, 16}, {2, 13}, {2, 18}, {0, 39},   // mesh0 1
      {2, 20}, {2, 22}, {2, 26}, {2, 23}, {2, 28}, {0, 39},   // mesh0 2
      {2, 30}, {2, 32}, {1, 36}, {2, 33}, {2, 37}, {0, 39}};  // mesh0 3
  EXPECT_EQ(size_offsets(m, l, {39, 2}), want);
}

// (4096, 4096) on (DP 30, TP 8), [_StridedShard(0, 8), Shard(0)]: 18 rows, 8 on DP rank 28,
// none on 29 (offset 4096); the offset is tp * 512 + 18 * dp. Spot checks of the 240 ranks.
TEST(DTensorExpectations, FsdpTpLargeUneven) {
  const auto got = on_dp_tp(30, 8, P::strided_shard(0, 8), P::shard(0), {4096, 4096});
  auto at = [&](int dp, int tp) { return got[static_cast<size_t>(dp * 8 + tp)]; };
  EXPECT_EQ(at(0, 0), (SizeOffset{18, 0}));
  EXPECT_EQ(at(1, 0), (SizeOffset{18, 18}));
  EXPECT_EQ(at(3, 2), (SizeOffset{18, 1078}));
  EXPECT_EQ(at(27, 7), (SizeOffset{18, 4070}));
  EXPECT_EQ(at(28, 0), (SizeOffset{8, 504}));
  EXPECT_EQ(at(28, 5), (SizeOffset{8, 3064}));
  EXPECT_EQ(at(29, 0), (SizeOffset{0, 4096}));
  EXPECT_EQ(at(29, 7), (SizeOffset{0, 4096}));
  for (int dp = 0; dp < 30; ++dp)
    for (int tp = 0; tp < 8; ++tp) {
      const int64_t size = dp < 28 ? 18 : dp == 28 ? 8 : 0;
      EXPECT_EQ(at(dp, tp), (SizeOffset{size, dp == 29 ? 4096 : tp * 512 + 18 * dp})) << dp << "," << tp;
    }
}

TEST(DTensorExpectations, FsdpTpMetaCompute) {  // world 8, TP 2, global (16, 2)
  const std::vector<SizeOffset> want = {{2, 0}, {2, 8}, {2, 2}, {2, 10}, {2, 4}, {2, 12}, {2, 6}, {2, 14}};
  EXPECT_EQ(on_dp_tp(4, 2, P::strided_shard(0, 2), P::shard(0), {16, 2}), want);
}

TEST(DTensorExpectations, UnevenFsdpTpMetaCompute) {  // world 8, TP 2, global (15, 5)
  const std::vector<SizeOffset> want = {{2, 0}, {2, 8}, {2, 2}, {2, 10}, {2, 4}, {2, 12}, {2, 6}, {1, 14}};
  EXPECT_EQ(on_dp_tp(4, 2, P::strided_shard(0, 2), P::shard(0), {15, 5}), want);
}

// The ranges behind one of them: dp 0 holds rows 0-3, 13-16, 26-29 of 39; the inner
// StridedShard(0, 4) over tp 2 splits those 12 rows into 4 chunks of 3 and keeps 2 + 1 of each.
TEST(NestedStridedShard, RangesOfTheThreeByFourCase) {
  const Mesh m(mesh3(1, 4, 2));
  const TensorLayout l{View::dense, {P::replicate(), P::strided_shard(0, 3), P::replicate(), P::strided_shard(0, 4)}};
  using R = std::vector<Range>;
  EXPECT_EQ(local_dim_ranges(m, l, {39, 2}, 0)[0], (R{{0, 2}, {3, 4}, {13, 14}, {15, 17}, {27, 29}}));
  EXPECT_EQ(local_dim_ranges(m, l, {39, 2}, 1)[0], (R{{2, 3}, {14, 15}, {26, 27}, {29, 30}}));
  EXPECT_EQ(local_dim_ranges(m, l, {39, 2}, 7)[0], R{});
  EXPECT_EQ(local_dim_ranges(m, l, {39, 2}, 6)[0], (R{{12, 13}, {25, 26}, {38, 39}}));
  EXPECT_EQ(local_dim_ranges(m, l, {39, 2}, 6)[1], (R{{0, 2}}));
}

// Three segments over tp 2 (refused before): DTensor's flat rule, 12 rows.
TEST(NestedStridedShard, ThreeSegmentsOverTwoRanks) {
  const Mesh m(mesh3(1, 2, 2));
  const TensorLayout l{View::dense, {P::replicate(), P::strided_shard(0, 3), P::replicate(), P::shard(0)}};
  using Idx = std::vector<int64_t>;
  const std::vector<Idx> want = {{0, 1, 4}, {5, 8, 9}, {2, 3, 6}, {7, 10, 11}};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(local_dim_indices(m, l, {12}, r)[0], want[static_cast<size_t>(r)]) << r;
  std::vector<Tensor<int64_t>> locals;
  const Tensor<int64_t> x({12}, {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21});
  for (int r = 0; r < 4; ++r) locals.push_back(shard(m, l, x, r));
  EXPECT_EQ(locals[1].data, (std::vector<int64_t>{15, 18, 19}));
  EXPECT_EQ(assemble(m, l, {12}, locals).data, x.data);
}

// Where FSDP2's storage and DTensor's left-to-right rule part (the segments divide, an
// empty piece comes first): parity keeps FSDP2's storage, FSDP of each TP shard.
TEST(NestedStridedShard, DividingSegmentsKeepFsdpOfEachTpShard) {
  const Mesh m(mesh3(1, 3, 2));
  const TensorLayout l{View::dense, {P::replicate(), P::strided_shard(0, 2), P::replicate(), P::shard(0)}};
  EXPECT_EQ(size_offsets(m, l, {7}), (std::vector<SizeOffset>{{2, 0}, {1, 4}, {2, 2}, {1, 5}, {0, 7}, {1, 6}}));
}

}  // namespace
}  // namespace parity::mesh::dtensor_expect_test
