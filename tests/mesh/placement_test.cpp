// Placements: torch.chunk's ceil rule, the worked examples of FOLDINGS.md, the standard
// parameter layouts, Partial, and the errors of layouts that cannot be applied.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "mesh/param_layout.h"
#include "mesh/placement.h"
#include "mesh/shard.h"

namespace parity::mesh::placement_test {  // one namespace per file: the tests build as unity batches
namespace {

using Idx = std::vector<int64_t>;
using P = Placement;

LayoutConfig lc(int64_t world, int64_t dpr, int64_t dps, int64_t tp, int64_t ep, int64_t etp) {
  LayoutConfig l;
  l.world = world;
  l.dp_replicate = dpr;
  l.dp_shard = dps;
  l.tp = tp;
  l.ep = ep;
  l.etp = etp;
  return l;
}

TEST(Chunk, TorchChunkCeilRule) {
  // torch.chunk(arange(5), 4) -> sizes 2, 2, 1 (and an empty fourth piece)
  EXPECT_EQ(chunk(5, 4, 0), (Range{0, 2}));
  EXPECT_EQ(chunk(5, 4, 1), (Range{2, 4}));
  EXPECT_EQ(chunk(5, 4, 2), (Range{4, 5}));
  EXPECT_EQ(chunk(5, 4, 3), (Range{5, 5}));
  // torch.chunk(arange(6), 4) -> 2, 2, 2 and nothing: not 2, 2, 1, 1
  EXPECT_EQ(chunk(6, 4, 2), (Range{4, 6}));
  EXPECT_EQ(chunk(6, 4, 3), (Range{6, 6}));
  EXPECT_EQ(chunk(2, 4, 1), (Range{1, 2}));
  EXPECT_EQ(chunk(2, 4, 2), (Range{2, 2}));
  EXPECT_EQ(chunk(0, 3, 0), (Range{0, 0}));
  EXPECT_EQ(chunk(7, 3, 2), (Range{6, 7}));
  EXPECT_THROW(chunk(4, 2, 2), Error);
}

TEST(Placement, Names) {
  EXPECT_EQ(layout_str({View::expert, {P::replicate(), P::strided_shard(0, 2), P::shard(0), P::shard(2)}}),
            "(Replicate, StridedShard(0, 2), Shard(0), Shard(2))");
  EXPECT_EQ(placement_str(P::partial()), "Partial(sum)");
}

// FOLDINGS.md: 8 rows on (dp_shard 2, tp 2) with (StridedShard(0, 2), Shard(0)):
// (0,0) rows 0-1, (0,1) rows 4-5, (1,0) rows 2-3, (1,1) rows 6-7.
TEST(WorkedExample, EightRowsOnFsdp2Tp2) {
  const Mesh m(lc(4, 1, 2, 2, 1, 1));
  const TensorLayout l{View::dense, {P::replicate(), P::strided_shard(0, 2), P::replicate(), P::shard(0)}};
  const Shape shape = {8, 3};
  EXPECT_EQ(local_dim_indices(m, l, shape, m.rank_of(View::dense, {0, 0, 0, 0}))[0], (Idx{0, 1}));
  EXPECT_EQ(local_dim_indices(m, l, shape, m.rank_of(View::dense, {0, 0, 0, 1}))[0], (Idx{4, 5}));
  EXPECT_EQ(local_dim_indices(m, l, shape, m.rank_of(View::dense, {0, 1, 0, 0}))[0], (Idx{2, 3}));
  EXPECT_EQ(local_dim_indices(m, l, shape, m.rank_of(View::dense, {0, 1, 0, 1}))[0], (Idx{6, 7}));
  EXPECT_EQ(local_dim_indices(m, l, shape, 3)[1], (Idx{0, 1, 2}));
  EXPECT_EQ(global_indices(m, l, shape, 1), (Idx{12, 13, 14, 15, 16, 17}));
}

// The same on 7 rows, dp_shard 3: FSDP of each TP shard (torch.chunk(7, 2) = 4 + 3 rows,
// then chunk(4, 3) = 2, 2, 0 and chunk(3, 3) = 1, 1, 1), never a chunk of the FSDP shard.
TEST(WorkedExample, UnevenStridedIsFsdpOfEachTpShard) {
  const Mesh m(lc(6, 1, 3, 2, 1, 1));
  const TensorLayout l{View::dense, {P::replicate(), P::strided_shard(0, 2), P::replicate(), P::shard(0)}};
  const std::vector<Idx> want = {{0, 1}, {4}, {2, 3}, {5}, {}, {6}};  // by rank = tp + 2·dps
  for (int r = 0; r < 6; ++r) EXPECT_EQ(local_dim_indices(m, l, {7}, r)[0], want[static_cast<size_t>(r)]) << r;
}

// FOLDINGS.md's even-case formula: N = 12, sf = 2, n = 3, b = 2; g = 7: j = 1, r = 1,
// owner 0, local index 3.
TEST(WorkedExample, StridedShardFormula) {
  const Mesh m(lc(3, 1, 3, 1, 1, 1));
  const TensorLayout l{View::dense, {P::replicate(), P::strided_shard(0, 2), P::replicate(), P::replicate()}};
  EXPECT_EQ(local_dim_indices(m, l, {12}, 0)[0], (Idx{0, 1, 6, 7}));
  EXPECT_EQ(local_dim_indices(m, l, {12}, 1)[0], (Idx{2, 3, 8, 9}));
  EXPECT_EQ(local_dim_indices(m, l, {12}, 2)[0], (Idx{4, 5, 10, 11}));
}

// Routed experts under dp_shard 4, tp 2, ep 2, etp 2 (edp_shard 2), E = 8, D = 3, F = 4.
// Expert rank = etp + 2·ep + 4·edps. EP rank e holds experts 4e..4e+3; FSDP splits them.
const std::vector<Idx> kExperts = {{0, 1}, {0, 1}, {4, 5}, {4, 5}, {2, 3}, {2, 3}, {6, 7}, {6, 7}};
const std::vector<Idx> kCols = {{0, 1}, {2, 3}, {0, 1}, {2, 3}, {0, 1}, {2, 3}, {0, 1}, {2, 3}};

TEST(WorkedExample, RoutedExpertsDpShard4Tp2Ep2Etp2) {
  const Mesh m(lc(8, 1, 4, 2, 2, 2));
  const ParamSpec w1{"layers.1.moe.experts.w1", {8, 3, 4}, Family::routed_experts, 0.02};
  const ParamSpec w2{"layers.1.moe.experts.w2", {8, 4, 3}, Family::routed_experts, 0.02};
  const TensorLayout l1 = param_layout(m, w1), l2 = param_layout(m, w2);
  EXPECT_EQ(l1, (TensorLayout{View::expert, {P::replicate(), P::strided_shard(0, 2), P::shard(0), P::shard(2)}}));
  EXPECT_EQ(l2, (TensorLayout{View::expert, {P::replicate(), P::strided_shard(0, 2), P::shard(0), P::shard(1)}}));
  for (int r = 0; r < 8; ++r) {
    const auto i1 = local_dim_indices(m, l1, w1.shape, r), i2 = local_dim_indices(m, l2, w2.shape, r);
    EXPECT_EQ(i1[0], kExperts[static_cast<size_t>(r)]) << r;
    EXPECT_EQ(i1[1], (Idx{0, 1, 2})) << r;
    EXPECT_EQ(i1[2], kCols[static_cast<size_t>(r)]) << r;
    EXPECT_EQ(i2[0], kExperts[static_cast<size_t>(r)]) << r;
    EXPECT_EQ(i2[1], kCols[static_cast<size_t>(r)]) << r;
    EXPECT_EQ(local_shape(m, l1, w1.shape, r), (Shape{2, 3, 2}));
  }
}

TEST(WorkedExample, RoutedExpertsWithDpReplicate2) {
  const Mesh m(lc(16, 2, 4, 2, 2, 2));
  const ParamSpec w1{"layers.1.moe.experts.w1", {8, 3, 4}, Family::routed_experts, 0.02};
  const TensorLayout l = param_layout(m, w1);
  EXPECT_EQ(layout_str(l), "(Replicate, StridedShard(0, 2), Shard(0), Shard(2))");
  for (int r = 0; r < 16; ++r) {
    const auto idx = local_dim_indices(m, l, w1.shape, r);
    EXPECT_EQ(idx[0], kExperts[static_cast<size_t>(r % 8)]) << r;
    EXPECT_EQ(idx[2], kCols[static_cast<size_t>(r % 8)]) << r;
  }
  EXPECT_EQ(replication(m, l), 2);
}

TEST(ParamLayout, DenseFamilies) {
  const Mesh m(lc(8, 1, 4, 2, 4, 1));
  auto of = [&](const char* name, Shape s, Family f) { return layout_str(param_layout(m, {name, s, f, 0.02})); };
  EXPECT_EQ(of("layers.0.attn.wq", {16, 16}, Family::attention), "(Replicate, Shard(0), Replicate, Shard(1))");
  EXPECT_EQ(of("layers.0.attn.wo", {16, 16}, Family::attention),
            "(Replicate, StridedShard(0, 2), Replicate, Shard(0))");
  EXPECT_EQ(of("layers.0.mlp.w2", {32, 16}, Family::dense_mlp), "(Replicate, StridedShard(0, 2), Replicate, Shard(0))");
  EXPECT_EQ(of("layers.1.moe.shared.w3", {16, 16}, Family::shared_experts),
            "(Replicate, Shard(0), Replicate, Shard(1))");
  EXPECT_EQ(of("embed.weight", {64, 16}, Family::embedding), "(Replicate, StridedShard(0, 2), Replicate, Shard(0))");
  EXPECT_EQ(of("lm_head.weight", {16, 64}, Family::head), "(Replicate, Shard(0), Replicate, Shard(1))");
  EXPECT_EQ(of("final_ln.bias", {16}, Family::layernorm), "(Replicate, Shard(0), Replicate, Replicate)");
  EXPECT_EQ(of("layers.1.moe.router.gate", {16, 4}, Family::router), "(Replicate, Shard(0), Replicate, Replicate)");
  EXPECT_EQ(of("layers.1.moe.experts.w3", {4, 16, 16}, Family::routed_experts),
            "(Replicate, StridedShard(0, 4), Shard(0), Shard(2))");
  const Mesh no_tp(lc(4, 1, 4, 1, 1, 1));
  EXPECT_EQ(layout_str(param_layout(no_tp, {"layers.0.attn.wo", {16, 16}, Family::attention, 0.02})),
            "(Replicate, Shard(0), Replicate, Shard(0))");
}

TEST(Layouts, RefusedWhenTheyCannotApply) {
  const Mesh m(lc(4, 1, 2, 2, 1, 1));
  EXPECT_THROW(check_layout(m, {View::dense, {P::replicate(), P::shard(0)}}, {4}), Error);
  EXPECT_THROW(check_layout(m, {View::dense, {P::replicate(), P::shard(1), P::replicate(), P::replicate()}}, {4}),
               Error);
  EXPECT_THROW(
      check_layout(m, {View::dense, {P::replicate(), P::strided_shard(0, 0), P::replicate(), P::replicate()}}, {4}),
      Error);
  // Three segments over tp 2 do not divide: accepted since issue 17, DTensor's flat rule
  // (dtensor_expect_test.cpp has its values).
  EXPECT_NO_THROW(
      check_layout(m, {View::dense, {P::replicate(), P::strided_shard(0, 3), P::replicate(), P::shard(0)}}, {12}));
  EXPECT_NO_THROW(
      check_layout(m, {View::dense, {P::replicate(), P::strided_shard(0, 3), P::replicate(), P::replicate()}}, {12}));
}

TEST(Shard, PartialGivesTheValueToCoordinateZeroAndMinusZeroElsewhere) {
  const Mesh m(lc(4, 2, 1, 2, 1, 1));  // dense (dpr 2, dps 1, tp 2)
  const TensorLayout l{View::dense, {P::partial(), P::replicate(), P::replicate(), P::shard(0)}};
  const Tensor<double> x({4}, {1.5, -0.0, 0.0, -2.0});
  EXPECT_EQ(shard(m, l, x, 1).data, (std::vector<double>{0.0, -2.0}));
  const Tensor<double> z = shard(m, l, x, 3);
  ASSERT_EQ(z.data.size(), 2u);
  EXPECT_TRUE(std::signbit(z.data[0]) && z.data[0] == 0.0 && std::signbit(z.data[1]));
  std::vector<Tensor<double>> locals;
  for (int r = 0; r < 4; ++r) locals.push_back(shard(m, l, x, r));
  const Tensor<double> back = assemble(m, l, {4}, locals);
  EXPECT_TRUE(std::signbit(back.data[1]));   // -0.0 + -0.0 stays -0.0
  EXPECT_FALSE(std::signbit(back.data[2]));  // 0.0 + -0.0 stays 0.0
  EXPECT_EQ(back.data, x.data);
  // Real addends are summed: rank r and r + 2 share a tp coordinate.
  locals = {Tensor<double>({2}, {1, 2}), Tensor<double>({2}, {3, 4}), Tensor<double>({2}, {10, 20}),
            Tensor<double>({2}, {30, 40})};
  EXPECT_EQ(assemble(m, l, {4}, locals).data, (std::vector<double>{11, 22, 33, 44}));
}

TEST(Assemble, ReplicasMustAgreeUnlessToldOtherwise) {
  const Mesh m(lc(2, 1, 1, 2, 1, 1));
  const TensorLayout l = replicated(View::dense);
  const std::vector<Tensor<int64_t>> locals = {Tensor<int64_t>({2}, {1, 2}), Tensor<int64_t>({2}, {1, 3})};
  EXPECT_THROW(assemble(m, l, {2}, locals), Error);
  EXPECT_EQ(assemble(m, l, {2}, locals, Replicas::take_first).data, (std::vector<int64_t>{1, 2}));
  EXPECT_THROW(assemble(m, l, {3}, locals), Error);  // wrong local shapes
}

TEST(Shard, ReplicationCountsReplicateAndPartialDimensions) {
  const Mesh m(lc(8, 2, 2, 2, 2, 1));
  EXPECT_EQ(replication(m, {View::dense, {P::replicate(), P::shard(0), P::replicate(), P::partial()}}), 4);
  EXPECT_EQ(replication(m, {View::expert, {P::shard(0), P::shard(0), P::shard(1), P::replicate()}}), 1);
  EXPECT_TRUE(has_empty_shards(m, {View::dense, {P::replicate(), P::shard(0), P::replicate(), P::shard(0)}}, {3}));
  EXPECT_TRUE(has_uneven_shards(m, {View::dense, {P::replicate(), P::shard(0), P::replicate(), P::replicate()}}, {3}));
  EXPECT_FALSE(has_uneven_shards(m, {View::dense, {P::replicate(), P::shard(0), P::replicate(), P::replicate()}}, {4}));
}

}  // namespace
}  // namespace parity::mesh::placement_test
