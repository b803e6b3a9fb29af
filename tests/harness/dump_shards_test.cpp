// Sharded tensors in a collected dump (harness/verdict/dump_shards.h, issue 46 item 5): where
// each placement puts a rank's shard, what assembling them gives, and the findings of the
// shards row (copies that differ and their sum, a wrong offset, flat pieces that leave a gap).
#include "harness/verdict/dump_shards.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"

namespace parity::dump_shards_test {  // one namespace per file: the tests build as unity batches
namespace {

using nlohmann::json;

// A full tensor 0, 1, 2, ... of `stored` shape.
std::vector<double> iota(const Shape& stored) {
  std::vector<double> v(static_cast<size_t>(numel(stored)));
  std::iota(v.begin(), v.end(), 0.0);
  return v;
}

// A dump whose manifest holds `mesh` and the placement of "params.w"; the file holds each rank's
// shard w@R as `shard(rank)` gives it.
struct Fixture {
  Dump d;
  SafetensorsFile f;
};

Fixture make(const json& mesh, const json& spec, const std::vector<std::pair<Shape, std::vector<double>>>& shards) {
  Fixture x;
  x.d.dir = "mem", x.d.role = "candidate";
  x.d.manifest = {{"mesh", mesh}, {"placements", {{"params.w", spec}}}};
  SafetensorsWriter w;
  for (size_t r = 0; r < shards.size(); ++r) {
    Tensor<double> t(shards[r].first);
    t.data.assign(shards[r].second.begin(), shards[r].second.end());
    w.add("w@" + std::to_string(r), t);
  }
  // this process's own file: ctest runs the tests of this binary as processes side by side
  const std::string path = ::testing::TempDir() + "/dump_shards_test_" + std::to_string(::getpid()) + ".safetensors";
  w.write(path);
  x.f = SafetensorsFile::read(path);
  return x;
}

// The values of `full` (stored layout, row-major (rows, cols)) in rows [r0, r1) x cols [c0, c1).
std::vector<double> slice(const std::vector<double>& full, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
                          int64_t c1) {
  std::vector<double> v;
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t j = c0; j < c1; ++j) v.push_back(full[static_cast<size_t>(i * cols + j)]);
  return v;
}

const json kMesh22 = {{"dims", {"dp", "tp"}}, {"shape", {2, 2}}, {"ranks", {{0, 0}, {0, 1}, {1, 0}, {1, 1}}}};

// Megatron's column split of an nn.Linear weight stored (out, in) = (5, 3), transposed to parity's
// (3, 5): rows 0..2 and 3..4 (torch.chunk's uneven split), Replicate over dp; assembled, it is the
// whole tensor in parity's layout, and nothing is found.
TEST(DumpShards, ColumnSplitAssemblesUnevenChunksInParitysLayout) {
  const Shape stored{5, 3};
  const auto full = iota(stored);
  const auto top = slice(full, 3, 0, 3, 0, 3), bottom = slice(full, 3, 3, 5, 0, 3);
  Fixture x = make(kMesh22, {{"stored", stored}, {"transposed", true}, {"placements", {"Replicate", "column"}}},
                   {{{3, 3}, top}, {{2, 3}, bottom}, {{3, 3}, top}, {{2, 3}, bottom}});
  const ShardPlan plan = ShardPlan::read(x.d);
  const ShardedTensor t = plan.load(x.d, x.f, "mem", "params.w", "w", Shape{3, 5});
  EXPECT_EQ(t.shards[1].where, "rank 1 (dp 0, tp 1; dp Replicate, tp column: dim 0 3..4)");
  EXPECT_EQ(t.shards[3].copy_of, 1);
  std::vector<std::string> gaps;
  const auto p = assemble(t, gaps);
  EXPECT_TRUE(gaps.empty());
  EXPECT_EQ(p[0 * 5 + 4], full[4 * 3 + 0]);  // parity (in 0, out 4) = torch (out 4, in 0)
  EXPECT_EQ(to_stored(t, p), full);
  std::string summed;
  EXPECT_TRUE(copies_differ(t, full, 1e-12, summed).empty());
  for (const Shard& s : t.shards) EXPECT_EQ(misplaced(s, stored, full), "");
}

// A shape its placement does not give is bad input, naming the rank and the placement.
TEST(DumpShards, AShardOfAnotherShapeIsRefused) {
  const Shape stored{4, 2};
  const auto full = iota(stored);
  Fixture x = make(kMesh22, {{"stored", stored}, {"placements", {"Replicate", "Shard(1)"}}},
                   {{{4, 1}, slice(full, 2, 0, 4, 0, 1)}, {{4, 2}, full}, {{4, 1}, slice(full, 2, 0, 4, 0, 1)},
                    {{4, 1}, slice(full, 2, 0, 4, 1, 2)}});
  const ShardPlan plan = ShardPlan::read(x.d);
  try {
    (void)plan.load(x.d, x.f, "mem", "params.w", "w", stored);
    FAIL() << "a shard of the wrong shape was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("w@1\" has shape (4, 2), but rank 1 (dp 0, tp 1; dp Replicate, tp "
                                         "Shard(1): dim 1 1..1) gives 4 elements"),
              std::string::npos)
        << e.what();
  }
}

// A mesh whose ranks do not each hold their own coordinates is bad input, named.
TEST(DumpShards, AMeshWithTwoRanksAtOneCoordinateIsRefused) {
  Dump d;
  d.dir = "mem", d.role = "candidate";
  d.manifest = {{"mesh", {{"dims", {"tp"}}, {"shape", {2}}, {"ranks", {{0}, {0}}}}}, {"placements", json::object()}};
  try {
    (void)ShardPlan::read(d);
    FAIL() << "a mesh with two ranks at one coordinate was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("$.mesh.ranks: ranks 0 and 1 have the same coordinates"), std::string::npos)
        << e.what();
  }
}

// Partial over tp, Replicate over dp: the tp parts are summed; copies over dp that differ are
// named, and "summed over dp" when their sum is the reference (each a part: not reduced).
TEST(DumpShards, PartialIsSummedAndCopiesThatArePartsAreNamed) {
  const Shape stored{2, 2};
  const std::vector<double> full{4, 8, 12, 16}, quarter{1, 2, 3, 4}, three{3, 6, 9, 12};
  const json spec = {{"stored", stored}, {"placements", {"Replicate", "Partial"}}};
  Fixture x = make(kMesh22, spec, {{stored, quarter}, {stored, three}, {stored, quarter}, {stored, three}});
  ShardedTensor t = ShardPlan::read(x.d).load(x.d, x.f, "mem", "params.w", "w", stored);
  std::vector<std::string> gaps;
  EXPECT_EQ(assemble(t, gaps), full);
  // not reduced over dp: rank 2 holds another part than rank 0, the two summed are the reference
  Fixture y = make(kMesh22, {{"stored", stored}, {"placements", {"Replicate", "Shard(0)"}}},
                   {{{1, 2}, {1, 2}}, {{1, 2}, {9, 12}}, {{1, 2}, {3, 6}}, {{1, 2}, {3, 4}}});
  t = ShardPlan::read(y.d).load(y.d, y.f, "mem", "params.w", "w", stored);
  std::string summed;
  const auto bad = copies_differ(t, full, 1e-12, summed);
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0], "rank 2 (dp 1, tp 0; dp Replicate, tp Shard(0): dim 0 0..0) differs from rank 0 (dp 0, tp 0; "
                    "dp Replicate, tp Shard(0): dim 0 0..0) though Replicate over dp");
  EXPECT_EQ(summed, "dp");
  EXPECT_EQ(copies_differ(t, std::vector<double>{5, 5, 5, 5}, 1e-12, summed).size(), 2u);
  EXPECT_EQ(summed, "");  // copies that differ and do not sum to the reference: no "each a part"
}

// issue 46e item 3: a Partial gradient's copies cross-checked on their sums. Partial over tp,
// Replicate over dp: copies over dp that differ are summed over tp too (each a part: not reduced
// over dp); each differing copy's line summed over tp is held to the reference, beside its
// representative's line.
TEST(DumpShards, APartialCopysSumOverThePartialDimIsCheckedAgainstTheReference) {
  const Shape stored{2, 2};
  const std::vector<double> full{4, 8, 12, 16}, quarter{1, 2, 3, 4}, three{3, 6, 9, 12}, half{2, 4, 6, 8};
  const json spec = {{"stored", stored}, {"placements", {"Replicate", "Partial"}}};
  const auto copies = [&](const std::vector<std::vector<double>>& v, std::string& summed) {
    Fixture x = make(kMesh22, spec, {{stored, v[0]}, {stored, v[1]}, {stored, v[2]}, {stored, v[3]}});
    const ShardedTensor t = ShardPlan::read(x.d).load(x.d, x.f, "mem", "params.w", "w", stored);
    return copies_differ(t, full, 1e-12, summed);
  };
  std::string summed;
  // not reduced over dp: every rank's own part; all four summed are the reference
  auto bad = copies({{1, 1, 1, 1}, {1, 3, 5, 7}, quarter, quarter}, summed);
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(summed, "dp");
  EXPECT_NE(bad[0].find("rank 2 (dp 1, tp 0; dp Replicate, tp Partial: whole) differs from rank 0"), std::string::npos)
      << bad[0];
  EXPECT_NE(bad[0].find("; its sum over tp (ranks 2, 3) is not the reference's (normwise 0.5), nor ranks 0, 1's"),
            std::string::npos) << bad[0];
  // rank 3's part wrong: its line's sum over tp is off, rank 0's line's is the reference's
  bad = copies({quarter, three, quarter, {3, 6, 9, 13}}, summed);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("rank 3 (dp 1, tp 1; dp Replicate, tp Partial: whole) differs from rank 1"), std::string::npos)
      << bad[0];
  EXPECT_NE(bad[0].find("its sum over tp (ranks 2, 3) is not the reference's (normwise 0.0456) while ranks 0, 1's "
                        "is"), std::string::npos) << bad[0];
  EXPECT_EQ(summed, "");
  // the parts split otherwise over tp on dp 1, their sum the same
  bad = copies({quarter, three, half, half}, summed);
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_NE(bad[0].find("its sum over tp (ranks 2, 3) is the reference's: the parts are split otherwise, their sum "
                        "agrees"), std::string::npos) << bad[0];
  EXPECT_EQ(summed, "");
}

// issue 46e item 4: HSDP's flat pieces, replicated over another mesh dim ("replicate": ["dp"]):
// the copies are not overlaps; a copy that holds other values, or another piece, is named.
TEST(DumpShards, FlatPiecesReplicatedOverAMeshDimAreCopies) {
  const Shape stored{2, 2};
  const std::vector<double> full{4, 8, 12, 16};
  const json spec = {{"stored", stored}, {"flat", {{0, 2}, {2, 2}, {0, 2}, {2, 2}}}, {"replicate", {"dp"}}};
  const auto load = [&](const json& sp, const std::vector<std::vector<double>>& v) {
    Fixture x = make(kMesh22, sp, {{{2}, v[0]}, {{2}, v[1]}, {{2}, v[2]}, {{2}, v[3]}});
    return ShardPlan::read(x.d).load(x.d, x.f, "mem", "params.w", "w", stored);
  };
  ShardedTensor t = load(spec, {{4, 8}, {12, 16}, {4, 8}, {12, 16}});
  std::vector<std::string> gaps;
  EXPECT_EQ(assemble(t, gaps), full);
  EXPECT_TRUE(gaps.empty()) << gaps.front();
  std::string summed;
  EXPECT_TRUE(copies_differ(t, full, 1e-12, summed).empty());
  // not reduced over dp: each replica's own part, their sum the reference
  t = load(spec, {{1, 2}, {3, 4}, {3, 6}, {9, 12}});
  auto bad = copies_differ(t, full, 1e-12, summed);
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0], "rank 2 (dp 1, tp 0; flat 0..1) differs from rank 0 (dp 0, tp 0; flat 0..1) though Replicate over "
                    "dp");
  EXPECT_EQ(summed, "dp");
  // a copy recorded at another piece
  json other = spec;
  other["flat"][3] = {1, 2};
  t = load(other, {{4, 8}, {12, 16}, {4, 8}, {8, 12}});
  bad = copies_differ(t, full, 1e-12, summed);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0], "rank 3 (dp 1, tp 1; flat 1..2) differs from rank 1 (dp 0, tp 1; flat 2..3) though Replicate over "
                    "dp");
  // a replica dim that is not the mesh's is bad input
  other = spec;
  other["replicate"] = {"rep"};
  EXPECT_THROW((void)load(other, {{4, 8}, {12, 16}, {4, 8}, {12, 16}}), ConfigError);
}

// A shard that is the reference's slice at another offset is named with the offset it holds; flat
// pieces that leave an element unheld are found.
TEST(DumpShards, AWrongOffsetAndAFlatGapAreNamed) {
  const Shape stored{4, 2};
  const auto full = iota(stored);
  const json mesh = {{"dims", {"tp"}}, {"shape", {2}}, {"ranks", {{0}, {1}}}};
  Fixture x = make(mesh, {{"stored", stored}, {"placements", {"Shard(0)"}}},
                   {{{2, 2}, slice(full, 2, 0, 2, 0, 2)}, {{2, 2}, slice(full, 2, 1, 3, 0, 2)}});
  const ShardedTensor t = ShardPlan::read(x.d).load(x.d, x.f, "mem", "params.w", "w", stored);
  EXPECT_EQ(misplaced(t.shards[0], stored, full), "");
  EXPECT_EQ(misplaced(t.shards[1], stored, full),
            "rank 1 (tp 1; tp Shard(0): dim 0 2..3) holds the reference's dim 0 1..2: a wrong shard offset");
  Fixture y = make(mesh, {{"stored", stored}, {"flat", {{0, 3}, {4, 4}}}},
                   {{{3}, {0, 1, 2}}, {{4}, {4, 5, 6, 7}}});
  std::vector<std::string> gaps;
  (void)assemble(ShardPlan::read(y.d).load(y.d, y.f, "mem", "params.w", "w", stored), gaps);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0], "no rank's flat piece holds element 3");
  Fixture z = make(mesh, {{"stored", stored}, {"flat", {{0, 4}, {4, 4}}}}, {{{4}, {0, 1, 2, 3}}, {{4}, {3, 4, 5, 6}}});
  const ShardedTensor flat = ShardPlan::read(z.d).load(z.d, z.f, "mem", "params.w", "w", stored);
  EXPECT_EQ(misplaced(flat.shards[1], stored, full),
            "rank 1 (tp 1; flat 4..7) holds the reference's elements 3..6: a wrong shard offset");
}

}  // namespace
}  // namespace parity::dump_shards_test
