// Context parallel in the mesh (issue 17): cp's place in the dense view (Megatron's
// tp-cp-dp: rank = tp_r + tp·(cp_r + cp·(dps_r + dp_shard·dpr_r))), its absence from the expert
// view (edp absorbs it), the group tables of docs/mesh.md worked by hand from those formulas,
// the dense placements (Replicate on cp) and the refused layouts.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "mesh/mesh_text.h"
#include "mesh/expect_refused.h"
#include "mesh/mesh.h"
#include "mesh/param_layout.h"
#include "mesh/placement.h"
#include "mesh/shard.h"

namespace parity::mesh {
namespace {

using testing::expect_refused;

LayoutConfig lcp(int64_t dps, int64_t cp, int64_t tp, int64_t ep, int64_t dpr = 1) {
  LayoutConfig l;
  l.dp_replicate = dpr, l.dp_shard = dps, l.cp = cp, l.tp = tp, l.ep = ep;
  l.world = dpr * dps * cp * tp;
  return l;
}

struct CpRow {
  LayoutConfig layout;
  const char *tp, *cp, *dense_dp, *ep, *edp;
  Folding folding;
};

// docs/mesh.md, "Group tables with context parallel", verbatim.
TEST(MeshCp, GroupTables) {
  const std::vector<CpRow> rows = {
      {lcp(1, 2, 1, 2), "singletons", "{01}", "{01}", "{01}", "singletons", Folding::dp2ep},
      {lcp(1, 2, 2, 1), "{01}{23}", "{02}{13}", "{02}{13}", "singletons", "{0123}", Folding::none},
      {lcp(2, 2, 1, 1), "singletons", "{01}{23}", "{0123}", "singletons", "{0123}", Folding::none},
      {lcp(2, 2, 1, 4), "singletons", "{01}{23}", "{0123}", "{0123}", "singletons", Folding::dp2ep},
      {lcp(2, 2, 2, 2), "{01}{23}{45}{67}", "{02}{13}{46}{57}", "{0246}{1357}", "{01}{23}{45}{67}", "{0246}{1357}",
       Folding::tp2ep},
  };
  for (const CpRow& row : rows) {
    const Mesh m(row.layout);
    SCOPED_TRACE(config_label(m));
    EXPECT_EQ(groups_str(m.groups(GroupKind::tp)), row.tp);
    EXPECT_EQ(groups_str(m.groups(GroupKind::cp)), row.cp);
    EXPECT_EQ(groups_str(m.groups(GroupKind::dense_dp)), row.dense_dp);
    EXPECT_EQ(groups_str(m.groups(GroupKind::ep)), row.ep);
    EXPECT_EQ(groups_str(m.groups(GroupKind::edp)), row.edp);
    EXPECT_EQ(folding(m), row.folding);
  }
}

TEST(MeshCp, RankFormulaAndReplicaGroups) {
  const Mesh m(lcp(2, 2, 2, 1, 2));  // dpr 2, dps 2, cp 2, tp 2: W 16
  // rank 13 = 1 + 2·(0 + 2·(0 + 2·1)): dpr 1, dps 1, cp 0, tp 1
  EXPECT_EQ(m.coords(View::dense, 13), (std::vector<int64_t>{1, 1, 0, 1}));
  EXPECT_EQ(m.coord(MeshDim::cp, 7), 1);   // 7 = 1 + 2·(1 + 2·1)
  EXPECT_EQ(m.size(MeshDim::edp_shard), 8);  // 16 / (dpr 2 · ep 1 · etp 1): cp absorbed
  EXPECT_EQ(groups_str(m.groups(GroupKind::dense_replicate)),
            "{0,2,8,10}{1,3,9,11}{4,6,12,14}{5,7,13,15}");  // dpr x cp
  EXPECT_EQ(groups_str(m.groups(GroupKind::dense_shard)), "{0,1,4,5}{2,3,6,7}{8,9,12,13}{10,11,14,15}");
  for (int r = 0; r < 16; ++r) EXPECT_EQ(m.rank_of(View::dense, m.coords(View::dense, r)), r);
}

// cp under the deepspeed order (docs/mesh.md, "Context parallel under each order"), worked
// by hand: W 8, dps 2, cp 2, tp 2, ep 4. A rank's place down its TP lane is
// dc_r = cp_r + 2·dps_r = rank / 2 and its expert index tp_r·4 + dc_r, so ranks 0..7 take
// expert indices 0 4 1 5 2 6 3 7; EP groups are runs of 4 indices, EDP groups stride 4.
// The dense groups are the megatron ones; the expert groups run down one TP lane (dp2ep),
// where megatron's span the lanes (cross-lane).
TEST(MeshCp, DeepspeedOrderReadsALaneOverDpShardTimesCp) {
  LayoutConfig l = lcp(2, 2, 2, 4);
  const Mesh meg(l);
  l.order = RankOrder::deepspeed;
  const Mesh ds(l);
  for (GroupKind k : {GroupKind::tp, GroupKind::cp, GroupKind::dense_dp, GroupKind::dense_replicate})
    EXPECT_EQ(groups_str(ds.groups(k)), groups_str(meg.groups(k))) << group_kind_name(k);
  EXPECT_EQ(groups_str(ds.groups(GroupKind::cp)), "{02}{13}{46}{57}");
  EXPECT_EQ(groups_str(ds.groups(GroupKind::dense_dp)), "{0246}{1357}");
  EXPECT_EQ(groups_str(ds.groups(GroupKind::ep)), "{0246}{1357}");
  EXPECT_EQ(groups_str(ds.groups(GroupKind::edp)), "{01}{23}{45}{67}");
  EXPECT_EQ(folding(ds), Folding::dp2ep);
  EXPECT_EQ(groups_str(meg.groups(GroupKind::ep)), "{0123}{4567}");
  EXPECT_EQ(groups_str(meg.groups(GroupKind::edp)), "{04}{15}{26}{37}");
  EXPECT_EQ(folding(meg), Folding::cross_lane);
  const std::vector<int64_t> want = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(order_linear(l, View::expert, r), want[static_cast<size_t>(r)]) << r;
    EXPECT_EQ(order_rank(l, View::expert, want[static_cast<size_t>(r)]), r) << r;
  }
  // With dp_replicate 2 (W 16) the rule runs inside each replica block of 8: EP groups
  // {0,2,4,6}{1,3,5,7}{8,10,12,14}{9,11,13,15}, in DeepSpeed's member order.
  LayoutConfig h = lcp(2, 2, 2, 4, 2);
  h.order = RankOrder::deepspeed;
  EXPECT_EQ(groups_str(Mesh(h).groups(GroupKind::ep)), "{0,2,4,6}{1,3,5,7}{8,10,12,14}{9,11,13,15}");
  EXPECT_EQ(groups_str(Mesh(h).groups(GroupKind::edp)), "{0,1,8,9}{2,3,10,11}{4,5,12,13}{6,7,14,15}");
}

// The mesh's text (parity explain's first part) names the order with the cp coordinate in both formulas.
TEST(MeshCp, ExplainDeepspeedFormulaWithCp) {
  LayoutConfig l = lcp(2, 2, 2, 4);
  l.order = RankOrder::deepspeed;
  ModelConfig model;
  model.experts = 4;
  const std::string t = mesh_text(Mesh(l), model, "ds cp");
  EXPECT_NE(t.find("rank order deepspeed\nrank = tp_r + tp*(cp_r + cp*(dps_r + dp_shard*dpr_r)); expert coordinates "
                   "from the TP-lane-major index\ntp_r*dp_shard*cp + cp_r + cp*dps_r"),
            std::string::npos)
      << t;
}

// cp 1 leaves the FOLDINGS.md table as it was.
TEST(MeshCp, DefaultLeavesFoldingsTable) {
  LayoutConfig l = lcp(4, 1, 2, 4);
  EXPECT_EQ(foldings_row(Mesh(l)),
            "| TP2, EP4, ETP1 | {01}{23}{45}{67} | {0246}{1357} | {0123}{4567} | {04}{15}{26}{37} | singletons |");
  EXPECT_EQ(groups_str(Mesh(l).groups(GroupKind::cp)), "singletons");
}

// Dense parameters are replicated over cp: FSDP shards over dp_shard only (docs/parallel.md).
TEST(MeshCp, DensePlacementsReplicateOverCp) {
  const Mesh m(lcp(2, 2, 2, 1));  // W 8
  const ParamSpec wo{"layers.0.attn.wo", {16, 16}, Family::attention, 0.02};
  const TensorLayout l = param_layout(m, wo);
  EXPECT_EQ(layout_str(l), "(Replicate, StridedShard(0, 2), Replicate, Shard(0))");
  EXPECT_EQ(replication(m, l), 2);
  // rank 2 (cp 1, tp 0) holds exactly what rank 0 (cp 0, tp 0) holds
  EXPECT_EQ(local_dim_indices(m, l, wo.shape, 2), local_dim_indices(m, l, wo.shape, 0));
  EXPECT_NE(local_dim_indices(m, l, wo.shape, 4), local_dim_indices(m, l, wo.shape, 0));  // dps 1
}

TEST(MeshCp, RefusedLayouts) {
  ModelConfig m;  // seq 8, heads 2
  LayoutConfig bad = lcp(1, 2, 1, 1);
  bad.world = 4;
  expect_refused(bad, m, "$.layout.world", "must equal dp_replicate*dp_shard*cp*tp (1*1*2*1), got 4");
  m.seq = 6;
  expect_refused(lcp(1, 4, 1, 1), m, "$.layout.cp", "must divide model.seq (6)");
  LayoutConfig sp = lcp(1, 2, 2, 1);
  sp.sp = true;
  expect_refused(sp, m, "$.layout.sp", "cp*layout.tp (2*2) to divide model.seq (6)");
  m.seq = 8;
  EXPECT_NO_THROW(validate_layout(sp, m));
  LayoutConfig gpu = lcp(1, 2, 1, 1);
  gpu.device = Device::cuda;
  EXPECT_NO_THROW(validate_layout(gpu, m));  // the row-block attention kernels (kernels/attention.cu)
  LayoutConfig zero = lcp(1, 1, 1, 1);
  zero.cp = 0;
  expect_refused(zero, m, "$.layout.cp", "must be >= 1, got 0");
}

// issue 47: layout.cp_order balanced needs cp > 1 and 2*cp chunks of every sequence; it is written
// (scenario record only: it moves no parameter, so a checkpoint's mesh leaves it out) and named
// only where it is not the default.
TEST(MeshCp, BalancedOrderRulesWordsAndCodec) {
  ModelConfig m;  // seq 8
  LayoutConfig one = lcp(2, 1, 1, 1);
  one.cp_order = CpOrder::balanced;
  expect_refused(one, m, "$.layout.cp_order", "balanced needs context parallel (layout.cp > 1), got cp 1");
  LayoutConfig four = lcp(1, 4, 1, 1);
  four.cp_order = CpOrder::balanced;
  EXPECT_NO_THROW(validate_layout(four, m));  // 8 chunks of 1
  m.seq = 12;
  expect_refused(four, m, "$.layout.cp_order", "2*layout.cp (8) chunks: it must divide model.seq (12)");
  LayoutConfig l = lcp(1, 2, 2, 1);
  EXPECT_EQ(layout_json(l, LayoutRecord::scenario).count("cp_order"), 0u);
  const std::string full = describe_layout(l, LayoutText::full);
  l.cp_order = CpOrder::balanced;
  EXPECT_EQ(describe_layout(l, LayoutText::full), full + ", cp balanced");
  EXPECT_EQ(describe_layout(l, LayoutText::stem), "cp2_balanced_tp2_etp1");
  EXPECT_EQ(layout_json(l, LayoutRecord::scenario)["cp_order"], "balanced");
  EXPECT_EQ(layout_json(l, LayoutRecord::checkpoint).count("cp_order"), 0u);
  EXPECT_EQ(read_layout(layout_json(l, LayoutRecord::scenario), "$.layout", LayoutRecord::scenario).cp_order,
            CpOrder::balanced);
}

}  // namespace
}  // namespace parity::mesh
