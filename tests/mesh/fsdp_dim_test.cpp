// layout.fsdp_dim: FSDP's shard dimension per parameter family (FSDP2's shard_placement_fn).
// The placements param_layout gives, the local shapes (E = 4 experts over 8 FSDP ranks leave
// no empty shard when FSDP shards the hidden dimension), and the refusals.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "mesh/param_layout.h"
#include "mesh/placement.h"

namespace parity::mesh::fsdp_dim_test {  // one namespace per file: the tests build as unity batches
namespace {

LayoutConfig lc(int64_t world, int64_t dps, int64_t tp, int64_t ep, int64_t etp) {
  LayoutConfig l;
  l.world = world;
  l.dp_shard = dps;
  l.tp = tp;
  l.ep = ep;
  l.etp = etp;
  return l;
}

FsdpDimRule dim(int64_t d) { return {FsdpDimRule::Kind::dim, d}; }
const FsdpDimRule kLargest{FsdpDimRule::Kind::largest, 0};

void set(LayoutConfig& l, Family f, FsdpDimRule r) { l.fsdp_dim[static_cast<size_t>(f)] = r; }

std::string of(const Mesh& m, const char* name, Shape s, Family f) {
  return layout_str(param_layout(m, {name, std::move(s), f, 0.02}));
}

TEST(FsdpDim, DefaultIsDimZero) {
  const Mesh m(lc(8, 4, 2, 2, 2));
  EXPECT_EQ(of(m, "layers.1.moe.experts.w1", {4, 16, 32}, Family::routed_experts),
            "(Replicate, StridedShard(0, 2), Shard(0), Shard(2))");
  EXPECT_EQ(of(m, "layers.0.attn.wo", {16, 16}, Family::attention),
            "(Replicate, StridedShard(0, 2), Replicate, Shard(0))");
}

// Routed experts on their hidden dimension: w1 (E, D, F) dim 2, w2 (E, F, D) dim 1.
TEST(FsdpDim, RoutedExpertsOnTheHiddenDimension) {
  LayoutConfig l = lc(8, 8, 1, 1, 1);
  set(l, Family::routed_experts, dim(-1));
  const Mesh m(l);
  EXPECT_EQ(of(m, "layers.1.moe.experts.w1", {4, 16, 32}, Family::routed_experts),
            "(Replicate, Shard(2), Shard(0), Shard(2))");  // etp 1 still names its dim
  const TensorLayout w1 = param_layout(m, {"layers.1.moe.experts.w1", {4, 16, 32}, Family::routed_experts, 0.02});
  for (int r = 0; r < 8; ++r) EXPECT_EQ(local_shape(m, w1, {4, 16, 32}, r), (Shape{4, 16, 4})) << r;
  EXPECT_FALSE(has_empty_shards(m, w1, {4, 16, 32}));
  const TensorLayout dim0 = param_layout(Mesh(lc(8, 8, 1, 1, 1)), {"w1", {4, 16, 32}, Family::routed_experts, 0.02});
  EXPECT_TRUE(has_empty_shards(Mesh(lc(8, 8, 1, 1, 1)), dim0, {4, 16, 32}));  // what dim 0 does: 4 of 8 empty
}

// With etp sharding the same dimension FSDP picks, the FSDP placement is strided over etp;
// over ep only when it shards dim 0.
TEST(FsdpDim, StridedWhenEtpOrTpShardsTheSameDimension) {
  LayoutConfig l = lc(16, 4, 4, 2, 4);  // edp_shard = 16 / (2 * 4) = 2
  set(l, Family::routed_experts, dim(2));
  set(l, Family::attention, dim(1));
  const Mesh m(l);
  EXPECT_EQ(of(m, "layers.1.moe.experts.w1", {4, 16, 32}, Family::routed_experts),
            "(Replicate, StridedShard(2, 4), Shard(0), Shard(2))");
  EXPECT_EQ(of(m, "layers.1.moe.experts.w2", {4, 32, 16}, Family::routed_experts),
            "(Replicate, Shard(2), Shard(0), Shard(1))");
  EXPECT_EQ(of(m, "layers.0.attn.wq", {16, 16}, Family::attention),
            "(Replicate, StridedShard(1, 4), Replicate, Shard(1))");
  EXPECT_EQ(of(m, "layers.0.attn.wo", {16, 16}, Family::attention), "(Replicate, Shard(1), Replicate, Shard(0))");
  // w1 rank 0: expert rows 0-1 (ep 0), columns: etp 0 holds 0-7, edps 0 keeps 0-3 of them.
  const TensorLayout w1 = param_layout(m, {"w1", {4, 16, 32}, Family::routed_experts, 0.02});
  const auto ranges = local_dim_ranges(m, w1, {4, 16, 32}, 0);
  EXPECT_EQ(ranges[0], (std::vector<Range>{{0, 2}}));
  EXPECT_EQ(ranges[2], (std::vector<Range>{{0, 4}}));
  const int r = m.rank_of(View::expert, {0, 1, 1, 3});  // edps 1, ep 1, etp 3: columns 24-31, second half
  EXPECT_EQ(local_dim_ranges(m, w1, {4, 16, 32}, r)[2], (std::vector<Range>{{28, 32}}));
  EXPECT_EQ(local_dim_ranges(m, w1, {4, 16, 32}, r)[0], (std::vector<Range>{{2, 4}}));
}

// "largest": the dimension with the most indices in the model-parallel-local tensor.
TEST(FsdpDim, LargestPicksTheBiggestModelParallelLocalDimension) {
  LayoutConfig l = lc(8, 4, 2, 4, 1);
  l.fsdp_dim.fill(kLargest);
  const Mesh m(l);
  // (E 4 / ep 4 = 1, D 16, F 32) -> 2
  EXPECT_EQ(fsdp_shard_dim(m, {"layers.1.moe.experts.w1", {4, 16, 32}, Family::routed_experts, 0.02}), 2);
  // wq (16, 48) colwise over tp 2: (16, 24) -> 1; wo (48, 16) rowwise: (24, 16) -> 0
  EXPECT_EQ(fsdp_shard_dim(m, {"layers.0.attn.wq", {16, 48}, Family::attention, 0.02}), 1);
  EXPECT_EQ(fsdp_shard_dim(m, {"layers.0.attn.wo", {48, 16}, Family::attention, 0.02}), 0);
  // a tie goes to the first: (16, 32) colwise over tp 2 is (16, 16) -> 0
  EXPECT_EQ(fsdp_shard_dim(m, {"layers.0.mlp.w1", {16, 32}, Family::dense_mlp, 0.02}), 0);
  EXPECT_EQ(fsdp_shard_dim(m, {"final_ln.weight", {16}, Family::layernorm, 0.0, 1.0}), 0);
}

TEST(FsdpDim, RefusesADimensionATensorOfTheFamilyLacks) {
  LayoutConfig l = lc(4, 4, 1, 1, 1);
  l.fsdp_dim.fill(dim(1));  // a bare `"fsdp_dim": 1`: LayerNorm weights are 1-D
  ModelConfig model;
  try {
    check_fsdp_dim(l, model);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "$.layout.fsdp_dim.layernorm");
    EXPECT_NE(e.rule().find("dim 1 is outside [-1, 1) for layers.0.ln1.weight of shape (16,)"), std::string::npos)
        << e.rule();
  }
  set(l, Family::layernorm, dim(0));
  EXPECT_NO_THROW(check_fsdp_dim(l, model));
  set(l, Family::routed_experts, dim(-4));
  try {
    check_fsdp_dim(l, model, "$.resume.layout.");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "$.resume.layout.fsdp_dim.routed_experts");
  }
  EXPECT_THROW(validate_layout(l, model), ConfigError);
}

}  // namespace
}  // namespace parity::mesh::fsdp_dim_test
