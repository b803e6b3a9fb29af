// The rank orders (LayoutConfig::order) and expert tensor parallel of any divisor, held
// against group tables written out as numbers:
//   - DeepSpeed's TP-strided expert groups: deepspeed/utils/groups.py,
//     _create_expert_and_data_parallel(ep, mp_size = tp, mp_mode = "tp") without a folding
//     spec, worked by hand from its rule (stage ranks listed TP-lane-major, EP groups are
//     consecutive runs of that list, EDP group p takes position p of every EP group). Member
//     order is DeepSpeed's list order.
//   - DeepSpeed's AutoEP+AutoTP folding tables (module_inject/auto_ep_folding.py,
//     expected_folding_group_tables; tests/unit/v1/moe/test_autoep_autotp_folding_*.py) and
//     the classic E+M+D table of _get_expert_parallel_ranks (tests/unit/utils/test_groups.py):
//     both are Megatron's order, as published.
//   - Megatron's expert RankGenerator (tp = etp, order "tp-ep-dp") with etp independent of tp.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "mesh/mesh_text.h"
#include "mesh/mesh.h"

namespace parity::mesh::mesh_order_test {  // one namespace per file: the tests build as unity batches
namespace {

using Table = std::vector<std::vector<int>>;

LayoutConfig lc(int64_t world, int64_t dpr, int64_t dps, int64_t tp, int64_t ep, int64_t etp,
                RankOrder order = RankOrder::megatron) {
  LayoutConfig l;
  l.world = world, l.dp_replicate = dpr, l.dp_shard = dps, l.tp = tp, l.ep = ep, l.etp = etp, l.order = order;
  return l;
}

// The partition as a set of groups: the outer order is free, each group's member order is not.
Table as_set(Table t) {
  std::sort(t.begin(), t.end());
  return t;
}

Table groups_of(const Mesh& m, GroupKind k) {
  Table out;
  for (const Group& g : m.groups(k)) out.emplace_back(g.begin(), g.end());
  return as_set(out);
}

void expect_groups(const LayoutConfig& l, GroupKind k, const Table& want) {
  const Mesh m(l);
  EXPECT_EQ(groups_of(m, k), as_set(want)) << config_label(m) << ", " << group_kind_name(k);
}

constexpr RankOrder ds = RankOrder::deepspeed;

// DeepSpeed, groups.py TP-strided path, W8 TP2 EP4: the table of issue 17.
TEST(RankOrderDeepSpeed, W8Tp2Ep4) {
  const LayoutConfig l = lc(8, 1, 4, 2, 4, 1, ds);
  expect_groups(l, GroupKind::tp, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expect_groups(l, GroupKind::dense_dp, {{0, 2, 4, 6}, {1, 3, 5, 7}});
  expect_groups(l, GroupKind::ep, {{0, 2, 4, 6}, {1, 3, 5, 7}});
  expect_groups(l, GroupKind::edp, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expect_groups(l, GroupKind::etp, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  EXPECT_EQ(folding(Mesh(l)), Folding::dp2ep);                   // EP groups are the dense DP groups
  EXPECT_EQ(folding(Mesh(lc(8, 1, 4, 2, 4, 1))), Folding::cross_lane);  // megatron: another folding
}

TEST(RankOrderDeepSpeed, W16Tp2Ep4) {
  const LayoutConfig l = lc(16, 1, 8, 2, 4, 1, ds);
  expect_groups(l, GroupKind::ep, {{0, 2, 4, 6}, {8, 10, 12, 14}, {1, 3, 5, 7}, {9, 11, 13, 15}});
  expect_groups(l, GroupKind::edp, {{0, 8, 1, 9}, {2, 10, 3, 11}, {4, 12, 5, 13}, {6, 14, 7, 15}});
  expect_groups(l, GroupKind::tp, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  expect_groups(l, GroupKind::dense_dp, {{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15}});
}

TEST(RankOrderDeepSpeed, W8Tp4Ep4) {
  const LayoutConfig l = lc(8, 1, 2, 4, 4, 1, ds);
  expect_groups(l, GroupKind::ep, {{0, 4, 1, 5}, {2, 6, 3, 7}});
  expect_groups(l, GroupKind::edp, {{0, 2}, {4, 6}, {1, 3}, {5, 7}});
  expect_groups(l, GroupKind::tp, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  expect_groups(l, GroupKind::dense_dp, {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  EXPECT_EQ(folding(Mesh(l)), Folding::cross_lane);
  EXPECT_EQ(folding(Mesh(lc(8, 1, 2, 4, 4, 1))), Folding::tp2ep);
}

TEST(RankOrderDeepSpeed, W4Tp2Ep2) {
  const LayoutConfig l = lc(4, 1, 2, 2, 2, 1, ds);
  expect_groups(l, GroupKind::ep, {{0, 2}, {1, 3}});
  expect_groups(l, GroupKind::edp, {{0, 1}, {2, 3}});
  // With etp 2 the ETP lane is the dp_shard coordinate and EP runs over the TP lanes: tp2ep
  // with etp > 1, which the megatron order cannot give (docs/coverage.md's stale rule).
  const LayoutConfig e = lc(4, 1, 2, 2, 2, 2, ds);
  expect_groups(e, GroupKind::ep, {{0, 1}, {2, 3}});
  expect_groups(e, GroupKind::etp, {{0, 2}, {1, 3}});
  EXPECT_EQ(folding(Mesh(e)), Folding::tp2ep);
}

TEST(RankOrderDeepSpeed, W4Tp4Ep4) {
  const LayoutConfig l = lc(4, 1, 1, 4, 4, 1, ds);
  expect_groups(l, GroupKind::ep, {{0, 1, 2, 3}});
  expect_groups(l, GroupKind::edp, {{0}, {1}, {2}, {3}});
  expect_groups(l, GroupKind::tp, {{0, 1, 2, 3}});
}

// DeepSpeed's AutoEP+AutoTP folding tables (expected_folding_group_tables) are Megatron's.
TEST(RankOrderMegatron, DeepSpeedAutoEpFoldingTables) {
  LayoutConfig l = lc(8, 1, 4, 2, 4, 1);
  expect_groups(l, GroupKind::tp, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expect_groups(l, GroupKind::dense_dp, {{0, 2, 4, 6}, {1, 3, 5, 7}});
  expect_groups(l, GroupKind::ep, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  expect_groups(l, GroupKind::edp, {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  const Mesh m(l);  // local_folding_ranks(5, W8 TP2 EP4)
  EXPECT_EQ(m.group(GroupKind::tp, 5), (Group{4, 5}));
  EXPECT_EQ(m.group(GroupKind::dense_dp, 5), (Group{1, 3, 5, 7}));
  EXPECT_EQ(m.group(GroupKind::ep, 5), (Group{4, 5, 6, 7}));
  EXPECT_EQ(m.group(GroupKind::edp, 5), (Group{1, 5}));
  l = lc(16, 1, 8, 2, 4, 1);
  expect_groups(l, GroupKind::ep, {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
  expect_groups(l, GroupKind::edp, {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
  l = lc(16, 1, 8, 2, 8, 1);
  expect_groups(l, GroupKind::ep, {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}});
  expect_groups(l, GroupKind::edp, {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}});
  const Mesh w4(lc(4, 1, 2, 2, 2, 1));  // local_folding_ranks(2, W4 TP2 EP2)
  EXPECT_EQ(w4.group(GroupKind::tp, 2), (Group{2, 3}));
  EXPECT_EQ(w4.group(GroupKind::ep, 2), (Group{2, 3}));
  EXPECT_EQ(w4.group(GroupKind::edp, 2), (Group{0, 2}));
}

// DeepSpeed's classic E+M+D table (W16, model 2, expert 4) is Megatron's with etp = tp = 2.
TEST(RankOrderMegatron, DeepSpeedClassicExpertParallelRanks) {
  const LayoutConfig l = lc(16, 1, 8, 2, 4, 2);
  expect_groups(l, GroupKind::ep, {{0, 2, 4, 6}, {8, 10, 12, 14}, {1, 3, 5, 7}, {9, 11, 13, 15}});
  expect_groups(l, GroupKind::edp, {{0, 8}, {2, 10}, {4, 12}, {6, 14}, {1, 9}, {3, 11}, {5, 13}, {7, 15}});
}

// Megatron's expert RankGenerator (tp = etp, ep, dp = W / (etp·ep), order tp-ep-dp) with etp
// independent of tp, worked by hand.
TEST(RankOrderMegatron, EtpIndependentOfTp) {
  LayoutConfig l = lc(8, 1, 2, 4, 2, 2);  // tp 4, etp 2
  expect_groups(l, GroupKind::tp, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  expect_groups(l, GroupKind::etp, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expect_groups(l, GroupKind::ep, {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  expect_groups(l, GroupKind::edp, {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  EXPECT_EQ(folding(Mesh(l)), Folding::cross_lane);  // inside one TP group, not a TP group
  l = lc(4, 1, 4, 1, 2, 2);  // tp 1, etp 2
  expect_groups(l, GroupKind::etp, {{0, 1}, {2, 3}});
  expect_groups(l, GroupKind::ep, {{0, 2}, {1, 3}});
  expect_groups(l, GroupKind::edp, {{0}, {1}, {2}, {3}});
  l = lc(8, 1, 4, 2, 2, 4);  // tp 2, etp 4
  expect_groups(l, GroupKind::etp, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  expect_groups(l, GroupKind::ep, {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  expect_groups(l, GroupKind::edp, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  EXPECT_EQ(folding(Mesh(l)), Folding::dp2ep);
}

// Under deepspeed with ETP and HSDP replicas: dp_replicate is the same coordinate in both views
// (the replica blocks are 0-7 and 8-15), and inside a block the expert index is
// tp_r·dp_shard + dps_r. W16 dpr 2, dps 4, tp 2, ep 2, etp 2: edp_shard 2.
TEST(RankOrderDeepSpeed, W16ReplicasEtp2) {
  const LayoutConfig l = lc(16, 2, 4, 2, 2, 2, ds);
  expect_groups(l, GroupKind::dp_replicate, {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}});
  expect_groups(l, GroupKind::etp, {{0, 2}, {4, 6}, {1, 3}, {5, 7}, {8, 10}, {12, 14}, {9, 11}, {13, 15}});
  expect_groups(l, GroupKind::ep, {{0, 4}, {2, 6}, {1, 5}, {3, 7}, {8, 12}, {10, 14}, {9, 13}, {11, 15}});
  expect_groups(l, GroupKind::edp_shard, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  expect_groups(l, GroupKind::edp, {{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}});
  const Mesh m(l);
  EXPECT_EQ(m.coords(View::expert, 13), (std::vector<int64_t>{1, 1, 1, 0}));  // tp 1, dps 2: index 6
  EXPECT_EQ(m.coords(View::dense, 13), (std::vector<int64_t>{1, 2, 0, 1}));   // dense unchanged (cp 1)
}

TEST(RankOrder, CoordsAndRanksAreInverse) {
  for (RankOrder o : {RankOrder::megatron, RankOrder::deepspeed})
    for (const LayoutConfig& l : {lc(16, 2, 4, 2, 2, 2, o), lc(8, 1, 2, 4, 4, 1, o), lc(12, 1, 3, 4, 2, 3, o)}) {
      const Mesh m(l);
      std::vector<bool> seen(static_cast<size_t>(m.world()), false);
      for (int r = 0; r < m.world(); ++r) {
        EXPECT_EQ(m.rank_of(View::dense, m.coords(View::dense, r)), r);
        EXPECT_EQ(m.rank_of(View::expert, m.coords(View::expert, r)), r);
        EXPECT_EQ(m.rank_at(View::expert, m.linear(View::expert, r)), r);
        EXPECT_EQ(m.linear(View::dense, r), r);
        seen[static_cast<size_t>(m.linear(View::expert, r))] = true;
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), true), m.world());
    }
}

// With tp 1 or dp_shard 1 the orders coincide; otherwise the groups differ.
TEST(RankOrder, SameGroupsWhenTpOrDpShardIsOne) {
  for (const LayoutConfig& l : {lc(8, 1, 8, 1, 4, 1), lc(8, 2, 1, 4, 2, 2), lc(4, 1, 1, 4, 4, 1)}) {
    LayoutConfig d = l;
    d.order = ds;
    for (GroupKind k : all_group_kinds()) EXPECT_EQ(groups_of(Mesh(l), k), groups_of(Mesh(d), k));
  }
  LayoutConfig d = lc(8, 1, 4, 2, 4, 1, ds);
  EXPECT_NE(groups_of(Mesh(lc(8, 1, 4, 2, 4, 1)), GroupKind::ep), groups_of(Mesh(d), GroupKind::ep));
}

// Any etp that tiles the world is a layout; the model rules are heads % tp and experts % ep.
TEST(RankOrder, AnyEtpThatTilesIsValid) {
  ModelConfig m;
  m.heads = 4;
  EXPECT_NO_THROW(validate_layout(lc(8, 1, 2, 4, 2, 2), m));
  EXPECT_NO_THROW(validate_layout(lc(4, 1, 4, 1, 2, 2), m));
  EXPECT_NO_THROW(validate_layout(lc(8, 1, 4, 2, 2, 4), m));
  EXPECT_NO_THROW(validate_layout(lc(8, 1, 4, 2, 4, 1, ds), m));
  try {
    validate_layout(lc(8, 1, 2, 4, 2, 3), m);
    ADD_FAILURE() << "etp 3 on W8 accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "$.layout.ep");
    EXPECT_NE(e.rule().find("dp_replicate*ep*etp (1*2*3) must divide layout.world (8)"), std::string::npos);
  }
}

TEST(RankOrder, NamesAndLabel) {
  EXPECT_EQ(order_name(RankOrder::megatron), "megatron");
  EXPECT_EQ(order_name(RankOrder::deepspeed), "deepspeed");
  EXPECT_EQ(foldings_row(Mesh(lc(8, 1, 4, 2, 4, 1, ds))),
            "| TP2, EP4, ETP1, deepspeed order | {01}{23}{45}{67} | {0246}{1357} | {0246}{1357} | {01}{23}{45}{67} | "
            "singletons |");
  EXPECT_EQ(foldings_row(Mesh(lc(8, 1, 2, 4, 4, 1, ds))),
            "| TP4, EP4, ETP1, deepspeed order | {0123}{4567} | {04}{15}{26}{37} | {0415}{2637} | {02}{13}{46}{57} | "
            "singletons |");
}

}  // namespace
}  // namespace parity::mesh::mesh_order_test
