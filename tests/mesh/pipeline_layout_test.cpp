// Pipeline parallel in the layout's home and the mesh (layout.pp, mesh.h, param_layout.h):
// words, the JSON codec and its refusals, the stage as the outermost rank coordinate under both
// orders, groups inside a stage, and which stage holds each parameter. Worked by hand.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "mesh/layout_config.h"
#include "mesh/mesh.h"
#include "mesh/param_layout.h"
#include "mesh/placement.h"

namespace parity::pipeline_layout_test {  // one namespace per file: the tests build as unity batches
namespace {

LayoutConfig pp2_dps2_tp2() {
  LayoutConfig l;
  l.world = 8, l.pp = 2, l.dp_shard = 2, l.tp = 2, l.ep = 2, l.etp = 1;
  return l;
}

std::pair<std::string, std::string> refusal(const nlohmann::json& layout, const ModelConfig& m) {
  try {
    validate_layout(read_layout(layout, "$.layout", LayoutRecord::scenario), m);
  } catch (const ConfigError& e) {
    return {e.path(), e.rule()};
  }
  return {"", "not refused"};
}

TEST(PipelineLayout, WordsAndCodec) {
  LayoutConfig l = pp2_dps2_tp2();
  EXPECT_EQ(describe_layout(l, LayoutText::full),
            "world 8 = pp 2 x dp_replicate 1 x dp_shard 2 x tp 2, ep 2, etp 1, 1f1b");
  EXPECT_EQ(describe_layout(l, LayoutText::brief), "pp 2 (1f1b) x dps 2 x tp 2, ep 2");
  EXPECT_EQ(describe_layout(l, LayoutText::stem), "pp2_1f1b_fsdp2_tp2_ep2");
  l.pp_schedule = PpSchedule::interleaved, l.pp_virtual = 2, l.pp_layers = {1, 0, 2, 1};
  EXPECT_EQ(
      describe_layout(l, LayoutText::report),
      "world 8 = pp 2 x dp_replicate 1 x dp_shard 2 x tp 2 (ep 2, etp 1), interleaved x 2 virtual, layers 1/0/2/1");
  EXPECT_EQ(describe_layout(l, LayoutText::stem), "pp2_interleaved2_uneven_fsdp2_tp2_ep2");
  const nlohmann::ordered_json j = layout_json(l, LayoutRecord::scenario);
  EXPECT_EQ(j.at("pp"), 2);
  EXPECT_EQ(j.at("pp_schedule"), "interleaved");
  const LayoutConfig back = read_layout(nlohmann::json(j), "$.layout", LayoutRecord::scenario);
  EXPECT_EQ(back.pp, 2);
  EXPECT_EQ(back.pp_virtual, 2);
  EXPECT_EQ(back.pp_layers, (std::vector<int64_t>{1, 0, 2, 1}));
  EXPECT_EQ(back.pp_schedule, PpSchedule::interleaved);
  // the checkpoint's mesh keeps the split (where elements live), not the schedule
  const std::string ck = layout_json(l, LayoutRecord::checkpoint).dump();
  EXPECT_NE(ck.find("\"pp_layers\":[1,0,2,1]"), std::string::npos) << ck;
  EXPECT_EQ(ck.find("pp_schedule"), std::string::npos) << ck;
  // no pipeline: no key written, so every older record stays byte for byte
  EXPECT_EQ(layout_json(LayoutConfig{}, LayoutRecord::scenario).dump().find("pp"), std::string::npos);
}

TEST(PipelineLayout, RulesNameTheirPath) {
  ModelConfig m;  // 2 layers, 1 micro-batch
  m.layers = 4, m.microbatches = 4;
  EXPECT_EQ(refusal({{"world", 4}, {"pp", 2}, {"dp_shard", 1}}, m).first, "$.layout.world");
  EXPECT_EQ(refusal({{"world", 4}, {"pp", 2}, {"dp_shard", 2}, {"pp_virtual", 2}}, m).first, "$.layout.pp_virtual");
  EXPECT_EQ(refusal({{"world", 2}, {"pp", 2}, {"pp_schedule", "interleaved"}}, m).first, "$.layout.pp_virtual");
  EXPECT_EQ(refusal({{"world", 2}, {"pp", 2}, {"pp_layers", {1, 2}}}, m),
            (std::pair<std::string, std::string>{"$.layout.pp_layers", "must sum to model.layers (4), got 3"}));
  EXPECT_EQ(refusal({{"world", 2}, {"pp", 2}, {"pp_layers", {5, -1}}}, m).first, "$.layout.pp_layers[1]");
  EXPECT_EQ(refusal({{"world", 2}, {"pp", 2}, {"pp_layers", {"a", 1}}}, m).first, "$.layout.pp_layers[0]");
  EXPECT_EQ(refusal({{"world", 2}, {"pp", 2}, {"pp_schedule", "zb"}}, m).first, "$.layout.pp_schedule");
  m.microbatches = 3;
  EXPECT_EQ(refusal({{"world", 2}, {"pp", 2}, {"pp_schedule", "interleaved"}, {"pp_virtual", 2}}, m).first,
            "$.layout.pp_schedule");
  m.microbatches = 4;
  EXPECT_EQ(refusal({{"world", 2}, {"pp", 2}, {"pp_schedule", "interleaved"}, {"pp_virtual", 2}}, m).second,
            "not refused");
  // the default split: as even as possible, the earlier virtual stages taking the extra layers
  LayoutConfig l;
  l.world = 3, l.pp = 3;
  EXPECT_EQ(pp_stage_layers(l, 7), (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 5}, {5, 7}}));
}

// pp outermost: rank = stage * W/pp + the rank inside the stage, whose coordinates are the
// stage layout's; every group but world and pp inside one stage; under deepspeed the expert
// groups are the stage's TP-strided ones (W/pp = 4, tp 2, ep 2: {0,2}{1,3} in each stage).
TEST(PipelineLayout, StageIsTheOutermostCoordinate) {
  for (RankOrder order : {RankOrder::megatron, RankOrder::deepspeed}) {
    LayoutConfig l = pp2_dps2_tp2();
    l.order = order;
    const mesh::Mesh m(l, 4);
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(m.stage(r), r / 4);
      EXPECT_EQ(m.coords(mesh::View::dense, r), m.coords(mesh::View::dense, r % 4)) << r;
      EXPECT_EQ(m.coords(mesh::View::expert, r), m.coords(mesh::View::expert, r % 4)) << r;
    }
    EXPECT_EQ(mesh::groups_str(m.groups(mesh::GroupKind::tp)), "{01}{23}{45}{67}");
    EXPECT_EQ(mesh::groups_str(m.groups(mesh::GroupKind::dense_dp)), "{02}{13}{46}{57}");
    EXPECT_EQ(mesh::groups_str(m.groups(mesh::GroupKind::pp)), "{04}{15}{26}{37}");
    EXPECT_EQ(mesh::groups_str(m.groups(mesh::GroupKind::world)), "{01234567}");
    EXPECT_EQ(mesh::groups_str(m.groups(mesh::GroupKind::ep)),
              order == RankOrder::megatron ? "{01}{23}{45}{67}" : "{02}{13}{46}{57}");
    EXPECT_EQ(m.rank_of(mesh::View::dense, {0, 1, 0, 1}, 1), 7);
  }
}

// Which stage holds each parameter: embed on the first (and the last when tied), final_ln and
// lm_head on the last, a layer's on its stage; a rank of another stage holds nothing, and the
// tied copy on the last stage is a replica the norm and the checkpoint do not count.
TEST(PipelineLayout, ParametersLiveOnTheirStage) {
  LayoutConfig l = pp2_dps2_tp2();
  l.pp_layers = {1, 3};
  const mesh::Mesh m(l);
  ModelConfig c;
  c.layers = 4, c.dense_layers = 1, c.tie_embeddings = true;
  for (const ParamSpec& sp : param_specs(c)) {
    const mesh::TensorLayout t = mesh::param_layout(m, sp);
    const int64_t layer = mesh::param_layer(sp);
    std::vector<int64_t> want =
        layer == 0 || sp.name == "embed.weight" ? std::vector<int64_t>{0} : std::vector<int64_t>{1};
    if (sp.name == "embed.weight") want.push_back(1);
    EXPECT_EQ(t.stages, want) << sp.name;
    for (int r = 0; r < 8; ++r) {
      const bool on = std::find(want.begin(), want.end(), m.stage(r)) != want.end();
      EXPECT_EQ(mesh::holds(m, t, r), on) << sp.name << " rank " << r;
      if (!on) {
        EXPECT_EQ(numel(mesh::local_shape(m, t, sp.shape, r)), 0) << sp.name << " rank " << r;
      }
    }
    // rank 0 and rank 4 are coordinate 0 everywhere inside stages 0 and 1: the first stage listed counts
    EXPECT_EQ(mesh::first_replica(m, t, 0), want.front() == 0) << sp.name;
    EXPECT_EQ(mesh::first_replica(m, t, 4), want.front() == 1) << sp.name;
  }
  EXPECT_EQ(mesh::layout_str(mesh::param_layout(m, param_specs(c)[0])),
            "(Replicate, StridedShard(0, 2), Replicate, Shard(0)) on stages {0, 1}");
  // the default split needs the model's layer count
  LayoutConfig even = pp2_dps2_tp2();
  EXPECT_THROW((void)mesh::Mesh(even).stage_of_layer(0), Error);
  EXPECT_EQ(mesh::Mesh(even, 4).stage_of_layer(2), 1);
}

}  // namespace
}  // namespace parity::pipeline_layout_test
