// `parity explain` (parallel/explain.h): the library text and the command, for FOLDINGS.md's
// W = 8, TP 2, EP 4.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "mesh/mesh_text.h"
#include "parallel/explain.h"
#include "common/parity_cmd.h"

namespace parity::explain_test {  // one namespace per file: the tests build as unity batches
using namespace parity::mesh;
namespace {

using test::parity_cmd;
using test::Result;

const char* kRow =
    "| TP2, EP4, ETP1 | {01}{23}{45}{67} | {0246}{1357} | {0123}{4567} | {04}{15}{26}{37} | singletons |";

LayoutConfig tp2_ep4() {
  LayoutConfig l;
  l.world = 8;
  l.dp_shard = 4;
  l.tp = 2;
  l.ep = 4;
  return l;
}

TEST(Explain, TextHasTheFoldingsRowCoordinatesAndLocalShapes) {
  ModelConfig model;  // vocab 64, dim 16, experts 4, expert_hidden 16
  const std::string t = explain(validate(tp2_ep4(), model), model, "t");
  EXPECT_NE(t.find(kRow), std::string::npos) << t;
  EXPECT_NE(t.find("| 5 | (0, 2, 0, 1) | (0, 1, 1, 0) |"), std::string::npos) << t;
  EXPECT_NE(t.find("world 8, folding cross-lane"), std::string::npos);
  EXPECT_NE(t.find("| ep_etp | expert: ep etp | 4 | {0123}{4567} |"), std::string::npos) << t;
  // embed (64, 16): TP 2 then FSDP 4 of each half -> 8 rows everywhere.
  EXPECT_NE(t.find("| embed.weight | 64x16 | dense | (Replicate, StridedShard(0, 2), Replicate, Shard(0)) | 8x16 | "
                   "8x16 | 8x16 | "
                   "8x16 | 8x16 | 8x16 | 8x16 | 8x16 |"),
            std::string::npos)
      << t;
  // 4 experts over EP 4 then edp_shard 2: one expert on edp_shard 0, an empty shard on 1.
  EXPECT_NE(t.find("| layers.1.moe.experts.w2 | 4x16x16 | expert | (Replicate, StridedShard(0, 4), Shard(0), "
                   "Shard(1)) | 1x16x16 | 1x16x16 | 1x16x16 | 1x16x16 | 0x16x16 | 0x16x16 | 0x16x16 | 0x16x16 |"),
            std::string::npos)
      << t;
  // EP groups {0123}{4567}: expert e lives on member e of each group.
  for (const char* row : {"| 0 | 0 | 0 4 |", "| 1 | 1 | 1 5 |", "| 2 | 2 | 2 6 |", "| 3 | 3 | 3 7 |"})
    EXPECT_NE(t.find(row), std::string::npos) << row << "\n" << t;
}

// The deepspeed order: named with its formula, the expert coordinates TP-lane-major (rank 5
// is tp 1, dp_shard 2: expert index 1·4 + 2 = 6 = (edps 1, ep 2)), EP groups down TP lanes.
TEST(Explain, DeepSpeedOrderShowsTheOrderAndItsGroups) {
  LayoutConfig l = tp2_ep4();
  l.order = RankOrder::deepspeed;
  const std::string t = explain(validate(l, ModelConfig{}), ModelConfig{}, "t");
  EXPECT_NE(t.find("world 8, folding dp2ep"), std::string::npos) << t;
  EXPECT_NE(t.find("rank order deepspeed\nrank = tp_r + tp*(dps_r + dp_shard*dpr_r); expert coordinates from the "
                   "TP-lane-major index\ntp_r*dp_shard + dps_r"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| 5 | (0, 2, 0, 1) | (0, 1, 2, 0) |"), std::string::npos) << t;
  EXPECT_NE(t.find("| TP2, EP4, ETP1, deepspeed order | {01}{23}{45}{67} | {0246}{1357} | {0246}{1357} | "
                   "{01}{23}{45}{67} | singletons |"),
            std::string::npos)
      << t;
  // expert e on EP coordinate e: ranks 2e (TP lane 0) and 2e + 1 (lane 1)
  for (const char* row : {"| 0 | 0 | 0 1 |", "| 1 | 1 | 2 3 |", "| 2 | 2 | 4 5 |", "| 3 | 3 | 6 7 |"})
    EXPECT_NE(t.find(row), std::string::npos) << row << "\n" << t;
  const ModelConfig model;
  EXPECT_NE(explain(validate(tp2_ep4(), model), model, "t").find("rank order megatron\n"), std::string::npos);
}

// --ranges: DTensor's global offset and the index ranges of every (parameter, rank).
TEST(Explain, RangesTableHasGlobalOffsetsAndIndexRanges) {
  ModelConfig model;
  EXPECT_EQ(explain(validate(tp2_ep4(), model), model, "t").find("## Index ranges"), std::string::npos);
  const std::string t = explain(validate(tp2_ep4(), model), model, "t", {true, ""});
  for (const char* row : {
           "| embed.weight | 0 | 8x16 | (0, 0) | [0:8, 0:16] |",     // tp 0 half, FSDP piece 0
           "| embed.weight | 1 | 8x16 | (32, 0) | [32:40, 0:16] |",  // tp 1 half
           "| embed.weight | 3 | 8x16 | (40, 0) | [40:48, 0:16] |",  // dps 1, tp 1
           "| layers.1.moe.experts.w2 | 1 | 1x16x16 | (1, 0, 0) | [1:2, 0:16, 0:16] |",
           "| layers.1.moe.experts.w2 | 5 | 0x16x16 | (4, 0, 0) | [-, 0:16, 0:16] |",  // empty: offset = E
           "| final_ln.weight | 6 | 4 | (12) | [12:16] |"})
    EXPECT_NE(t.find(row), std::string::npos) << row << "\n" << t;
  const std::string only = explain(validate(tp2_ep4(), model), model, "t", {true, "experts.w2"});
  EXPECT_EQ(only.find("| embed.weight |"), std::string::npos);
  EXPECT_NE(only.find("| layers.1.moe.experts.w2 | 7 |"), std::string::npos) << only;
}

TEST(Explain, RangesOfANestedStridedShardAreAList) {
  EXPECT_EQ(ranges_str({{{0, 2}, {3, 4}, {13, 14}, {15, 17}, {27, 29}}, {{0, 2}}}),
            "[0:2+3:4+13:14+15:17+27:29, 0:2]");
  EXPECT_EQ(ranges_str({{}, {{0, 16}}}), "[-, 0:16]");
  EXPECT_EQ(ranges_str({}), "[]");
}

// Context parallel: cp 2 x tp 2 on W 4 (docs/mesh.md's table): the cp groups, the dense
// coordinates with cp, dense parameters replicated over cp, experts absorbing cp in edp.
TEST(Explain, ShowsTheContextParallelGroup) {
  ModelConfig model;
  LayoutConfig l;
  l.world = 4, l.cp = 2, l.tp = 2;
  const std::string t = explain(validate(l, model), model, "cp");
  EXPECT_NE(t.find("dense view  (dp_replicate 1, dp_shard 1, cp 2, tp 2)"), std::string::npos) << t;
  EXPECT_NE(t.find("expert view (dp_replicate 1, edp_shard 4, ep 1, etp 1)"), std::string::npos) << t;
  EXPECT_NE(t.find("context parallel: cp 2, groups {02}{13}"), std::string::npos) << t;
  EXPECT_NE(t.find("| cp | dense: cp | 2 | {02}{13} |"), std::string::npos) << t;
  EXPECT_NE(t.find("| dense_dp | dense: dp_replicate dp_shard cp | 2 | {02}{13} |"), std::string::npos) << t;
  EXPECT_NE(t.find("| 2 | (0, 0, 1, 0) | (0, 2, 0, 0) |"), std::string::npos) << t;
  EXPECT_NE(t.find("| CP2, TP2, EP1, ETP1 |"), std::string::npos) << t;
  EXPECT_NE(
      t.find("| layers.0.attn.wq | 16x16 | dense | (Replicate, Shard(0), Replicate, Shard(1)) | 16x8 | 16x8 | 16x8 | "
             "16x8 |"),
      std::string::npos)
      << t;
}

// layout.recompute gets one line, and only when it is on (layouts without it explain as before).
TEST(Explain, SaysWhatRecomputeKeepsAndReruns) {
  ModelConfig model;
  LayoutConfig l = tp2_ep4();
  EXPECT_EQ(explain(validate(l, model), model, "t").find("recompute"), std::string::npos);
  l.recompute = Recompute::mlp;
  const std::string t = explain(validate(l, model), model, "t");
  EXPECT_NE(t.find("activation recompute: mlp (every FFN block (ln2, dense MLP or MoE) keeps only its input and its "
                   "routing; the backward re-runs that forward, collectives included"),
            std::string::npos)
      << t;
  l.recompute = Recompute::full;
  const std::string full = explain(validate(l, model), model, "t");
  EXPECT_NE(full.find("activation recompute: full (every layer keeps only its input"), std::string::npos);
}

// The text ends with the parameter plan it read the placements from (the cli adds nothing).
TEST(Explain, EndsWithTheParameterPlan) {
  ModelConfig model;
  model.experts = 4;
  const std::string t = explain(validate(tp2_ep4(), model), model, "t");
  const size_t params = t.find("## Parameters (local shape on each rank)"), red = t.find("## Reduction plan");
  ASSERT_NE(params, std::string::npos) << t;
  ASSERT_NE(red, std::string::npos) << t;
  EXPECT_LT(params, red);
  EXPECT_NE(t.find("## Parameter plan (each parameter's entry: parallel/param_plan.h)\n", red), std::string::npos) << t;
  EXPECT_EQ(t.find("pipeline"), std::string::npos) << t;  // no schedule without pp
}

TEST(Explain, RefusesAnImpossibleLayout) {
  LayoutConfig l = tp2_ep4();
  l.ep = 8;
  l.dp_shard = 4;
  EXPECT_THROW(explain(validate(l, ModelConfig{}), ModelConfig{}, "t"), ConfigError);
}

std::string write_scenario(const std::string& stem, int64_t dp_shard, int64_t tp, int64_t ep) {
  std::ifstream in(std::string(PARITY_SOURCE_DIR) + "/scenarios/tiny.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["name"] = stem;
  j["layout"]["world"] = dp_shard * tp;
  j["layout"]["dp_shard"] = dp_shard;
  j["layout"]["tp"] = tp;
  j["layout"]["ep"] = ep;
  j["model"]["batch"] = 8 * dp_shard;  // whole sequences per data-parallel rank (validate, mesh/layout_config.h)
  const auto path = std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(getpid()) + ".json");
  std::ofstream(path) << j.dump(2);
  return path.string();
}

TEST(ExplainCommand, W8Tp2Ep4MatchesFoldings) {
  const std::string path = write_scenario("explain_w8_tp2_ep4", 4, 2, 4);
  const Result r = parity_cmd("explain " + path);
  std::filesystem::remove(path);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(kRow), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 7 | (0, 3, 0, 1) | (0, 1, 3, 0) |"), std::string::npos) << r.out;
  // the reduction plan, last (printed by the cli from parallel/reduction_plan.h): TP 2 sums the router
  EXPECT_NE(r.out.find("## Reduction plan"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| router | sum over tp | dense_dp | sum |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| routed_experts | - | edp | sum |"), std::string::npos) << r.out;
}

// Routed experts FSDP-sharded on their last (hidden) dimension: 4 experts over 8 ranks, each
// rank 2 of the 16 columns of w1 (E 4, D 16, F 16).
TEST(ExplainCommand, RangesWithAnFsdpDim) {
  std::string path = write_scenario("explain_fsdp_dim", 8, 1, 1);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  j["layout"]["fsdp_dim"] = {{"routed_experts", -1}};
  std::ofstream(path) << j.dump(2);
  const Result r = parity_cmd("explain " + path + " --ranges --param experts.w1");
  std::filesystem::remove(path);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| layers.1.moe.experts.w1 | 4x16x16 | expert | (Replicate, Shard(2), Shard(0), Shard(2)) | "
                       "4x16x2 |"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| layers.1.moe.experts.w1 | 0 | 4x16x2 | (0, 0, 0) | [0:4, 0:16, 0:2] |"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| layers.1.moe.experts.w1 | 7 | 4x16x2 | (0, 0, 14) | [0:4, 0:16, 14:16] |"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("| embed.weight |"), std::string::npos) << r.out;
}

TEST(ExplainCommand, ImpossibleLayoutExitsTwoNamingTheField) {
  const std::string path = write_scenario("explain_bad", 2, 4, 1);  // tiny has heads 2
  const Result r = parity_cmd("explain " + path);
  std::filesystem::remove(path);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("$.layout.tp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("must divide model.heads (2)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace parity::explain_test
