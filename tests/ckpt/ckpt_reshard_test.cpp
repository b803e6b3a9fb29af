// Save under one layout, load under another (one process playing every rank): the unsharded
// state is bitwise the formula's, for the pairs and for every pair of a layout list.
#include <gtest/gtest.h>

#include <algorithm>

#include "ckpt/inspect.h"
#include "ckpt_helpers.h"

namespace parity::ckpt {
namespace {

using testing::load_layout_wrong;
using testing::save_layout;
using testing::Scratch;

class Reshard : public Scratch {
 protected:
  // a -> b and b -> a, each checked bitwise, and the checkpoint verified by inspect.
  void both_ways(const std::string& a, const std::string& b) {
    save_layout(path("a"), a, 1);
    EXPECT_EQ(load_layout_wrong(path("a"), a, 1), 0) << a << " -> " << a;
    EXPECT_EQ(load_layout_wrong(path("a"), b, 1), 0) << a << " -> " << b;
    save_layout(path("b"), b, 2);
    EXPECT_EQ(load_layout_wrong(path("b"), a, 2), 0) << b << " -> " << a;
    EXPECT_TRUE(inspect(path("a")).ok()) << format_report(inspect(path("a")), false);
  }
};

TEST_F(Reshard, W1AndFsdp8) { both_ways("dps1", "dps8"); }
TEST_F(Reshard, StridedShardsBothWays) { both_ways("dps4.tp2", "dpr2.dps2.tp2.ep2.etp2"); }
TEST_F(Reshard, Tp2epAndCrossLane) { both_ways("dps2.tp2.ep2", "dps2.tp2.ep4"); }
TEST_F(Reshard, UnevenFsdp3AndFsdp4) { both_ways("dps3", "dps4"); }
TEST_F(Reshard, DpShard2Tp2DimZeroStrided) { both_ways("dps2.tp2", "dps1"); }
// The same degrees under the two rank orders hold other shards on each rank (issue 17).
TEST_F(Reshard, DeepSpeedAndMegatronOrders) { both_ways("dps2.tp4.ep4.ds1", "dps2.tp4.ep4"); }
TEST_F(Reshard, DeepSpeedWithReplicasAndEtpOutsideOneOrTp) {
  both_ways("dpr2.dps2.tp2.ep2.etp2.ds1", "dps2.tp4.ep2.etp2");
}
// layout.fsdp_dim: the same mesh with FSDP on another dimension, and across meshes.
TEST_F(Reshard, ExpertsOnDimZeroAndOnTheirLastDim) { both_ways("dps8", "dps8.fde2"); }
TEST_F(Reshard, FsdpDimOneStridedOverTpAndDimZero) { both_ways("dps4.tp2.fdd1", "dps4.tp2"); }
TEST_F(Reshard, FsdpDimsAcrossMeshes) { both_ways("dps4.tp2.ep2.etp2.fde2.fdd1", "dpr2.dps2.tp2.ep2.etp2.fde1"); }

// Context parallel under the deepspeed order (docs/mesh.md): the lane index runs over
// dp_shard x cp, so the experts sit elsewhere than under megatron; cp ranks hold the same
// dense shards.
TEST_F(Reshard, ContextParallelUnderBothOrders) {
  both_ways("dps2.cp2.tp2.ep4.ds1", "dps2.cp2.tp2.ep4");
  both_ways("dps2.cp2.tp2.ep4.ds1", "dps4.tp2.ep2");
}

TEST_F(Reshard, WorldSize8To2To8ThroughWhatWasLoaded) {
  // Each hop saves what it loaded (not the formula), so a lost element would propagate.
  save_layout(path("w8"), "dpr2.dps2.tp2.ep2.etp2", 5);
  testing::Ranks two = testing::make_ranks("dps2", 5);
  std::vector<const ShardedState*> ptrs;
  const Checkpoint ck = Checkpoint::open(path("w8"));
  for (int r = 0; r < 2; ++r) {
    two.states[static_cast<size_t>(r)]->scramble();
    load_rank(ck, *two.mesh, two.states[static_cast<size_t>(r)]->state(), r, testing::model_json());
    EXPECT_EQ(two.states[static_cast<size_t>(r)]->wrong(), 0);
    ptrs.push_back(&two.states[static_cast<size_t>(r)]->state());
  }
  save_all(*two.mesh, ptrs, {10, 640, testing::model_json()}, path("w2"));
  EXPECT_EQ(load_layout_wrong(path("w2"), "dps4.tp2.ep4", 5), 0);
  EXPECT_EQ(load_layout_wrong(path("w2"), "dpr2.dps2.tp2.ep2.etp2", 5), 0);
}

TEST_F(Reshard, EveryPairOfALayoutList) {
  const std::vector<std::string> layouts = {"dps1", "dps3", "dps2.tp2", "tp4", "dpr2.dps2.tp2.ep2.etp2",
                                            "dps4.tp2.ep4", "dpr3", "dps6.ep2"};
  for (size_t i = 0; i < layouts.size(); ++i) {
    const std::string dir = path("p" + std::to_string(i));
    save_layout(dir, layouts[i], 10 + i);
    for (const auto& to : layouts) EXPECT_EQ(load_layout_wrong(dir, to, 10 + i), 0) << layouts[i] << " -> " << to;
  }
}

TEST_F(Reshard, ReplicasAreWrittenOnce) {
  // dp_replicate 3: the files of ranks 1 and 2 hold no tensor; together the files hold each
  // element once (plus headers).
  save_layout(path("r"), "dpr3", 1);
  const Metadata md = read_metadata(path("r"));
  int64_t chunk_bytes = 0, state_bytes = 0;
  for (const auto& t : md.tensors) {
    state_bytes += numel(t.shape) * 8;
    for (const auto& c : t.chunks) {
      EXPECT_EQ(c.rank, 0) << t.name;
      chunk_bytes += c.bytes;
    }
  }
  EXPECT_EQ(chunk_bytes, state_bytes);
}

TEST_F(Reshard, ALoadReadsOnlyTheBlocksItNeeds) {
  // (300, 1024) fp64, 2.4 MB: block_rows 128, three checksum blocks. Corrupt the last
  // block: dp_shard 4 rank 0 (rows 0-74) still loads, rank 3 (rows 225-299) is refused.
  Tensor<double> big({300, 1024});
  for (size_t i = 0; i < big.data.size(); ++i) big.data[i] = static_cast<double>(i) * 0.5;
  ShardedState st;
  st.add("big", big.shape, mesh::replicated(mesh::View::dense), big);
  const mesh::Mesh w1{LayoutConfig{}};
  save_all(w1, {&st}, {1, 2, testing::model_json()}, path("big"));
  const Checkpoint ck = Checkpoint::open(path("big"));
  const Metadata& md = ck.md();
  ASSERT_EQ(md.tensors[0].chunks[0].checksums.size(), 3u);
  {
    std::fstream f(path("big") + "/rank0.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(md.tensors[0].chunks[0].offset + 280 * 1024 * 8);
    f.put('\x7f');
  }
  LayoutConfig l4;
  l4.world = l4.dp_shard = 4;
  const mesh::Mesh m4(l4);
  const mesh::TensorLayout fsdp{mesh::View::dense,
                                {mesh::Placement::replicate(), mesh::Placement::shard(0), mesh::Placement::replicate(),
                                 mesh::Placement::replicate()}};
  Tensor<double> part;
  ShardedState s0;
  s0.add("big", big.shape, fsdp, part);
  load_rank(ck, m4, s0, 0, testing::model_json());
  EXPECT_EQ(part.shape, (Shape{75, 1024}));
  EXPECT_EQ(part.data[75 * 1024 - 1], big.data[75 * 1024 - 1]);
  // rank 2 (rows 150-224) reads block 1 only, which starts at row 128
  load_rank(ck, m4, s0, 2, testing::model_json());
  ASSERT_EQ(part.shape, (Shape{75, 1024}));
  EXPECT_TRUE(std::equal(part.data.begin(), part.data.end(), big.data.begin() + 150 * 1024));
  try {
    load_rank(ck, m4, s0, 3, testing::model_json());
    ADD_FAILURE() << "a corrupt block was loaded";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch in tensor 'big'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rows [256, 300)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace parity::ckpt
