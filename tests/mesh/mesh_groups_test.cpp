// The group tables of docs/design/foldings.md (W = 8) and the same tables worked by hand
// for W = 16, rank coordinates in both views, folding names, and refused layouts.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "mesh/mesh_text.h"
#include "mesh/expect_refused.h"
#include "mesh/mesh.h"

namespace parity::mesh::mesh_groups_test {  // one namespace per file: the tests build as unity batches
namespace {

using testing::expect_refused;

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

struct TableRow {
  LayoutConfig layout;
  const char* tp;
  const char* dense_dp;
  const char* ep;
  const char* edp;
  const char* etp;
};

void expect_row(const TableRow& row) {
  const Mesh m(row.layout);
  SCOPED_TRACE(config_label(m));
  EXPECT_EQ(groups_str(m.groups(GroupKind::tp)), row.tp);
  EXPECT_EQ(groups_str(m.groups(GroupKind::dense_dp)), row.dense_dp);
  EXPECT_EQ(groups_str(m.groups(GroupKind::ep)), row.ep);
  EXPECT_EQ(groups_str(m.groups(GroupKind::edp)), row.edp);
  EXPECT_EQ(groups_str(m.groups(GroupKind::etp)), row.etp);
}

// FOLDINGS.md, "Group tables that must come out (W = 8, dp_replicate = 1)", verbatim.
TEST(MeshGroups, FoldingsTableW8) {
  expect_row(
      {lc(8, 1, 4, 2, 4, 1), "{01}{23}{45}{67}", "{0246}{1357}", "{0123}{4567}", "{04}{15}{26}{37}", "singletons"});
  expect_row(
      {lc(8, 1, 2, 4, 4, 1), "{0123}{4567}", "{04}{15}{26}{37}", "{0123}{4567}", "{04}{15}{26}{37}", "singletons"});
  expect_row({lc(8, 1, 4, 2, 2, 2), "{01}{23}{45}{67}", "{0246}{1357}", "{02}{13}{46}{57}", "{04}{15}{26}{37}",
              "{01}{23}{45}{67}"});
}

TEST(MeshGroups, FoldingsRowsW8AsPrinted) {
  EXPECT_EQ(foldings_row(Mesh(lc(8, 1, 4, 2, 4, 1))),
            "| TP2, EP4, ETP1 | {01}{23}{45}{67} | {0246}{1357} | {0123}{4567} | {04}{15}{26}{37} | singletons |");
  EXPECT_EQ(foldings_row(Mesh(lc(8, 1, 2, 4, 4, 1))),
            "| TP4, EP4, ETP1 | {0123}{4567} | {04}{15}{26}{37} | {0123}{4567} | {04}{15}{26}{37} | singletons |");
  EXPECT_EQ(
      foldings_row(Mesh(lc(8, 1, 4, 2, 2, 2))),
      "| TP2, EP2, ETP2 | {01}{23}{45}{67} | {0246}{1357} | {02}{13}{46}{57} | {04}{15}{26}{37} | {01}{23}{45}{67} |");
}

// The same table for W = 16, worked by hand from the rank formulas of FOLDINGS.md.
TEST(MeshGroups, TableW16) {
  // TP2, EP4, ETP1, dp_shard 8: cross-lane.
  expect_row({lc(16, 1, 8, 2, 4, 1), "{0,1}{2,3}{4,5}{6,7}{8,9}{10,11}{12,13}{14,15}",
              "{0,2,4,6,8,10,12,14}{1,3,5,7,9,11,13,15}", "{0,1,2,3}{4,5,6,7}{8,9,10,11}{12,13,14,15}",
              "{0,4,8,12}{1,5,9,13}{2,6,10,14}{3,7,11,15}", "singletons"});
  // TP4, EP4, ETP1, dp_shard 4: tp2ep.
  expect_row({lc(16, 1, 4, 4, 4, 1), "{0,1,2,3}{4,5,6,7}{8,9,10,11}{12,13,14,15}",
              "{0,4,8,12}{1,5,9,13}{2,6,10,14}{3,7,11,15}", "{0,1,2,3}{4,5,6,7}{8,9,10,11}{12,13,14,15}",
              "{0,4,8,12}{1,5,9,13}{2,6,10,14}{3,7,11,15}", "singletons"});
  // TP2, EP8, ETP2, dp_shard 8: dp2ep, edp_shard 1.
  expect_row({lc(16, 1, 8, 2, 8, 2), "{0,1}{2,3}{4,5}{6,7}{8,9}{10,11}{12,13}{14,15}",
              "{0,2,4,6,8,10,12,14}{1,3,5,7,9,11,13,15}", "{0,2,4,6,8,10,12,14}{1,3,5,7,9,11,13,15}", "singletons",
              "{0,1}{2,3}{4,5}{6,7}{8,9}{10,11}{12,13}{14,15}"});
  // dp_replicate 2, dp_shard 4, TP2, EP2, ETP2 (FOLDINGS.md's worked example with replicas).
  expect_row({lc(16, 2, 4, 2, 2, 2), "{0,1}{2,3}{4,5}{6,7}{8,9}{10,11}{12,13}{14,15}",
              "{0,2,4,6,8,10,12,14}{1,3,5,7,9,11,13,15}", "{0,2}{1,3}{4,6}{5,7}{8,10}{9,11}{12,14}{13,15}",
              "{0,4,8,12}{1,5,9,13}{2,6,10,14}{3,7,11,15}", "{0,1}{2,3}{4,5}{6,7}{8,9}{10,11}{12,13}{14,15}"});
  // dp_replicate 2, dp_shard 8, TP1, EP4, ETP1: dp2ep.
  expect_row({lc(16, 2, 8, 1, 4, 1), "singletons", "{0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}",
              "{0,1,2,3}{4,5,6,7}{8,9,10,11}{12,13,14,15}", "{0,4,8,12}{1,5,9,13}{2,6,10,14}{3,7,11,15}",
              "singletons"});
}

TEST(MeshGroups, SingleDimensionGroupsW16WithReplicas) {
  const Mesh m(lc(16, 2, 4, 2, 2, 2));
  EXPECT_EQ(groups_str(m.groups(GroupKind::dp_replicate)), "{0,8}{1,9}{2,10}{3,11}{4,12}{5,13}{6,14}{7,15}");
  EXPECT_EQ(groups_str(m.groups(GroupKind::dp_shard)), "{0,2,4,6}{1,3,5,7}{8,10,12,14}{9,11,13,15}");
  EXPECT_EQ(groups_str(m.groups(GroupKind::edp_shard)), "{0,4}{1,5}{2,6}{3,7}{8,12}{9,13}{10,14}{11,15}");
  EXPECT_EQ(groups_str(m.groups(GroupKind::ep_etp)), "{0,1,2,3}{4,5,6,7}{8,9,10,11}{12,13,14,15}");
  EXPECT_EQ(groups_str(m.groups(GroupKind::dense_shard)), "{0,1,2,3,4,5,6,7}{8,9,10,11,12,13,14,15}");
  EXPECT_EQ(m.groups(GroupKind::world).size(), 1u);
  EXPECT_EQ(m.size(MeshDim::edp_shard), 2);
}

TEST(MeshCoords, RankFormulasOfFoldings) {
  const Mesh m(lc(16, 2, 4, 2, 2, 2));
  // rank = tp_r + tp·(cp_r + cp·(dps_r + dp_shard·dpr_r)) (cp 1); rank = etp_r + etp·(ep_r + ep·(edps_r +
  // edp_shard·dpr_r)).
  EXPECT_EQ(m.coords(View::dense, 13), (std::vector<int64_t>{1, 2, 0, 1}));
  EXPECT_EQ(m.coords(View::expert, 13), (std::vector<int64_t>{1, 1, 0, 1}));
  EXPECT_EQ(m.coords(View::expert, 6), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(m.coord(MeshDim::edp_shard, 6), 1);
  EXPECT_EQ(m.coord(MeshDim::tp, 7), 1);
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(m.rank_of(View::dense, m.coords(View::dense, r)), r);
    EXPECT_EQ(m.rank_of(View::expert, m.coords(View::expert, r)), r);
  }
  EXPECT_THROW(m.coords(View::dense, 16), Error);
  EXPECT_THROW(m.rank_of(View::dense, {0, 4, 0, 0}), Error);
}

TEST(MeshFolding, NamesFromGroups) {
  EXPECT_EQ(folding(Mesh(lc(8, 1, 4, 2, 4, 1))), Folding::cross_lane);
  EXPECT_EQ(folding(Mesh(lc(8, 1, 2, 4, 4, 1))), Folding::tp2ep);
  EXPECT_EQ(folding(Mesh(lc(8, 1, 4, 2, 2, 2))), Folding::dp2ep);
  EXPECT_EQ(folding(Mesh(lc(8, 1, 8, 1, 4, 1))), Folding::dp2ep);
  EXPECT_EQ(folding(Mesh(lc(8, 1, 4, 2, 1, 1))), Folding::none);
}

TEST(MeshValidation, RefusesLayoutsThatCannotExist) {
  ModelConfig m;  // heads 2, experts 4, seq 8
  expect_refused(lc(8, 1, 3, 2, 1, 1), m, "$.layout.world", "must equal dp_replicate*dp_shard*tp (1*3*2), got 8");
  expect_refused(lc(8, 1, 8, 1, 0, 1), m, "$.layout.ep", "must be >= 1, got 0");
  expect_refused(lc(6, 1, 3, 2, 4, 1), m, "$.layout.ep", "dp_replicate*ep*etp (1*4*1) must divide layout.world (6)");
  expect_refused(lc(8, 1, 2, 4, 2, 1), m, "$.layout.tp", "must divide model.heads (2)");
  expect_refused(lc(8, 1, 8, 1, 8, 1), m, "$.layout.ep", "must divide model.experts (4)");
  m.heads = 4;
  expect_refused(lc(8, 1, 2, 4, 2, 3), m, "$.layout.ep", "dp_replicate*ep*etp (1*2*3) must divide layout.world (8)");
  EXPECT_NO_THROW(validate_layout(lc(8, 1, 2, 4, 2, 2), m));  // etp 2 under tp 4: any etp that tiles
  // model.kv_heads: split over tp (a multiple of it) or replicated (tp a multiple of it); not between
  ModelConfig gqa = m;
  gqa.heads = 8, gqa.dim = 16, gqa.kv_heads = 2;
  EXPECT_NO_THROW(validate_layout(lc(4, 1, 1, 4, 1, 1), gqa));  // each KV head over 2 lanes
  EXPECT_NO_THROW(validate_layout(lc(2, 1, 1, 2, 1, 1), gqa));  // one KV head per lane
  gqa.kv_heads = 4;
  EXPECT_NO_THROW(validate_layout(lc(8, 1, 1, 8, 1, 1), gqa));  // tp a multiple of kv_heads
  gqa.heads = 12, gqa.dim = 24, gqa.kv_heads = 4;
  expect_refused(lc(6, 1, 1, 6, 1, 1), gqa, "$.layout.tp",
                 "must divide model.kv_heads (4: KV heads split over the lanes) or be a multiple of it");
  LayoutConfig sp = lc(8, 1, 8, 1, 1, 1);
  sp.sp = true;
  expect_refused(sp, m, "$.layout.sp", "requires layout.tp > 1");
  m.seq = 6;
  sp = lc(8, 1, 2, 4, 1, 1);
  sp.sp = true;
  expect_refused(sp, m, "$.layout.sp", "to divide model.seq (6)");
  EXPECT_NO_THROW(validate_layout(lc(8, 1, 4, 2, 4, 1), ModelConfig{}));
}

TEST(MeshValidation, MeshAloneChecksStructure) {
  EXPECT_THROW(Mesh(lc(0, 1, 1, 1, 1, 1)), ConfigError);
  EXPECT_THROW(Mesh(lc(4, 1, 2, 1, 1, 1)), ConfigError);
  EXPECT_NO_THROW(Mesh(lc(8, 1, 2, 4, 2, 2)));  // etp 2 != tp 4 is a mesh (and a layout)
}

}  // namespace
}  // namespace parity::mesh::mesh_groups_test
