// The layout's home (mesh/layout_config.h): its words, worked by hand for each form (the
// golden files' and the reports' wording must not move: they are recorded in files), its JSON
// codec (a round trip, the checkpoint record's exact bytes, refusals naming the JSON path),
// and that every shipped scenario's short form names every degree above 1 (the matrix table
// once dropped cp: "cp2_ep2" showed as ", ep 2").
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "harness/scenario/scenario.h"
#include "mesh/layout_config.h"
#include "mesh/param_layout.h"

namespace parity::layout_config_test {  // one namespace per file: the tests build as unity batches
namespace {

LayoutConfig make(int64_t dpr, int64_t dps, int64_t cp, int64_t tp, int64_t ep, int64_t etp) {
  LayoutConfig l;
  l.dp_replicate = dpr, l.dp_shard = dps, l.cp = cp, l.tp = tp, l.ep = ep, l.etp = etp;
  l.world = dpr * dps * cp * tp;
  return l;
}

TEST(LayoutConfig, WordsOfEachForm) {
  const LayoutConfig one = make(1, 1, 1, 1, 1, 1);
  EXPECT_EQ(describe_layout(one, LayoutText::full), "world 1 = dp_replicate 1 x dp_shard 1 x tp 1, ep 1, etp 1");
  EXPECT_EQ(describe_layout(one, LayoutText::report), "world 1 = dp_replicate 1 x dp_shard 1 x tp 1 (ep 1, etp 1)");
  EXPECT_EQ(describe_layout(one, LayoutText::brief), "one device");
  EXPECT_EQ(describe_layout(one, LayoutText::stem), "");

  LayoutConfig l = make(2, 2, 1, 2, 2, 2);
  l.sp = true, l.order = RankOrder::deepspeed;
  EXPECT_EQ(describe_layout(l, LayoutText::full),
            "world 8 = dp_replicate 2 x dp_shard 2 x tp 2, ep 2, etp 2, sp, deepspeed order");
  EXPECT_EQ(describe_layout(l, LayoutText::report),
            "world 8 = dp_replicate 2 x dp_shard 2 x tp 2 (ep 2, etp 2), sp, deepspeed order");
  EXPECT_EQ(describe_layout(l, LayoutText::brief), "dpr 2 x dps 2 x tp 2 (sp), ep 2 etp 2, deepspeed order");
  EXPECT_EQ(describe_layout(l, LayoutText::stem), "ds_hsdp2x2_tp2_sp_ep2_etp2");

  const LayoutConfig cp = make(1, 2, 2, 2, 4, 1);
  EXPECT_EQ(describe_layout(cp, LayoutText::full), "world 8 = dp_replicate 1 x dp_shard 2 x cp 2 x tp 2, ep 4, etp 1");
  EXPECT_EQ(describe_layout(cp, LayoutText::report),
            "world 8 = dp_replicate 1 x dp_shard 2 x cp 2 x tp 2 (ep 4, etp 1)");
  EXPECT_EQ(describe_layout(cp, LayoutText::brief), "dps 2 x cp 2 x tp 2, ep 4");
  EXPECT_EQ(describe_layout(cp, LayoutText::stem), "fsdp2_cp2_tp2_ep4");
  EXPECT_EQ(describe_layout(make(1, 1, 2, 1, 1, 1), LayoutText::brief), "cp 2");
  EXPECT_EQ(describe_layout(make(1, 1, 2, 1, 2, 1), LayoutText::brief), "cp 2, ep 2");
}

TEST(LayoutConfig, ScenarioRecordRoundTrips) {
  LayoutConfig l = make(2, 2, 2, 1, 2, 2);
  l.order = RankOrder::deepspeed, l.backend = comm::Backend::mpi, l.device = Device::cuda;
  l.fsdp_dim[4] = {FsdpDimRule::Kind::largest, 0};
  const nlohmann::json j = layout_json(l, LayoutRecord::scenario);
  const LayoutConfig back = read_layout(j, "$.layout", LayoutRecord::scenario);
  EXPECT_EQ(layout_json(back, LayoutRecord::scenario).dump(),
            nlohmann::ordered_json(layout_json(l, LayoutRecord::scenario)).dump());
  EXPECT_EQ(back.backend, comm::Backend::mpi);
  EXPECT_EQ(back.device, Device::cuda);
  EXPECT_EQ(back.fsdp_dim, l.fsdp_dim);
}

// The checkpoint's record is written byte for byte as before the codec moved here: the
// degrees in this order, cp and order only where they are not the default.
TEST(LayoutConfig, CheckpointRecordBytes) {
  LayoutConfig l = make(1, 4, 1, 2, 2, 1);
  l.backend = comm::Backend::mpi, l.sp = true;  // not part of the record
  EXPECT_EQ(layout_json(l, LayoutRecord::checkpoint).dump(),
            R"({"world":8,"dp_replicate":1,"dp_shard":4,"tp":2,"ep":2,"etp":1})");
  l = make(1, 2, 2, 2, 1, 1);
  l.order = RankOrder::deepspeed;
  EXPECT_EQ(layout_json(l, LayoutRecord::checkpoint).dump(),
            R"({"world":8,"dp_replicate":1,"dp_shard":2,"tp":2,"ep":1,"etp":1,"cp":2,"order":"deepspeed"})");
  const LayoutConfig back = read_layout(layout_json(l, LayoutRecord::checkpoint), "$.mesh", LayoutRecord::checkpoint);
  EXPECT_EQ(back.cp, 2);
  EXPECT_EQ(back.order, RankOrder::deepspeed);
}

// Each row of the degree table travels through both records and is named by the checkpoint's
// check (mesh_differences, which ckpt/verify.cpp reads): a degree set to 3 alone comes back as
// 3 from either record and is the one difference from the default, under its own key.
TEST(LayoutConfig, EveryDegreeOfTheTableTravelsAndIsChecked) {
  std::set<std::string> keys;
  std::vector<int64_t LayoutConfig::*> fields;  // member pointers have no order: found by ==
  for (const Degree& d : layout_degrees()) {
    EXPECT_TRUE(keys.insert(std::string(d.key)).second) << d.key << " twice";
    EXPECT_EQ(std::find(fields.begin(), fields.end(), d.field), fields.end()) << d.key << ": another row's field";
    fields.push_back(d.field);
    LayoutConfig l;
    l.*d.field = 3;
    for (LayoutRecord r : {LayoutRecord::scenario, LayoutRecord::checkpoint}) {
      const nlohmann::ordered_json j = layout_json(l, r);
      EXPECT_EQ(j.value(std::string(d.key), int64_t{0}), 3) << d.key << " in " << j.dump();
      EXPECT_EQ(read_layout(nlohmann::json::parse(j.dump()), "$.mesh", r).*d.field, 3) << d.key;
    }
    const std::vector<FieldDifference> diff = mesh_differences(l, LayoutConfig{});
    ASSERT_EQ(diff.size(), 1u) << d.key;
    EXPECT_EQ(diff[0].key, d.key);
    EXPECT_EQ(diff[0].a, "3");
    EXPECT_EQ(diff[0].b, "1");
  }
  EXPECT_TRUE(keys.count("pp_virtual"));  // the degrees the checkpoint check once missed
  LayoutConfig l;
  l.pp_layers = {3, 1}, l.order = RankOrder::deepspeed;
  const std::vector<FieldDifference> diff = mesh_differences(l, LayoutConfig{});
  ASSERT_EQ(diff.size(), 2u);
  EXPECT_EQ(diff[0].key + " " + diff[0].a + " " + diff[0].b, "pp_layers [3,1] even");
  EXPECT_EQ(diff[1].key + " " + diff[1].a + " " + diff[1].b, "order deepspeed megatron");
}

std::pair<std::string, std::string> refusal(const nlohmann::json& j, LayoutRecord r, const std::string& path) {
  try {
    (void)read_layout(j, path, r);
  } catch (const ConfigError& e) {
    return {e.path(), e.rule()};
  }
  return {"", "not refused"};
}

TEST(LayoutConfig, RefusalsNameTheJsonPath) {
  auto [path, rule] = refusal({{"world", 2}, {"tpp", 2}}, LayoutRecord::scenario, "$.resume.layout");
  EXPECT_EQ(path, "$.resume.layout.tpp");
  EXPECT_EQ(rule.rfind("unknown key; allowed keys are: world, dp_replicate", 0), 0u) << rule;
  std::tie(path, rule) = refusal({{"backend", "tcp"}}, LayoutRecord::scenario, "$.layout");
  EXPECT_EQ(path, "$.layout.backend");
  EXPECT_EQ(rule, "expected one of \"gloo\", \"mpi\", \"nccl\", \"sim\", got string \"tcp\"");
  std::tie(path, rule) = refusal({{"device", "tpu"}}, LayoutRecord::scenario, "$.layout");
  EXPECT_EQ(path, "$.layout.device");
  // a checkpoint's record holds the degrees: the rest is not its own, and world..etp are required
  std::tie(path, rule) = refusal({{"world", 2}, {"backend", "gloo"}}, LayoutRecord::checkpoint, "$.mesh");
  EXPECT_EQ(path, "$.mesh.backend");
  std::tie(path, rule) = refusal({{"world", 2}, {"dp_replicate", 1}, {"dp_shard", 2}, {"tp", 1}, {"ep", 1}},
                                 LayoutRecord::checkpoint, "$.mesh");
  EXPECT_EQ(path, "$.mesh.etp");
  EXPECT_EQ(rule, "required key is missing");
  std::tie(path, rule) = refusal({{"world", 2.5}}, LayoutRecord::scenario, "$.layout");
  EXPECT_EQ(path, "$.layout.world");
}

// layout.dp_sharding: the default adds no word (recorded wording stays), the others are named,
// read back, and a bad value is refused at its JSON path.
TEST(LayoutConfig, DpShardingWordsCodecAndRefusal) {
  LayoutConfig l = make(1, 4, 1, 2, 2, 1);
  const std::string full = describe_layout(l, LayoutText::full), report = describe_layout(l, LayoutText::report);
  EXPECT_EQ(full, "world 8 = dp_replicate 1 x dp_shard 4 x tp 2, ep 2, etp 1");
  EXPECT_EQ(layout_json(l, LayoutRecord::scenario).dump().find("dp_sharding"), std::string::npos);
  l.dp_sharding = DpSharding::zero2, l.expert_dp_sharding = DpSharding::fsdp;
  EXPECT_EQ(describe_layout(l, LayoutText::full), full + ", zero2, experts fsdp");
  EXPECT_EQ(describe_layout(l, LayoutText::report), report + ", zero2, experts fsdp");
  EXPECT_EQ(describe_layout(l, LayoutText::brief), "dps 4 x tp 2, ep 2, zero2, experts fsdp");
  EXPECT_EQ(describe_layout(l, LayoutText::stem), "zero2_dp4_tp2_ep2_efsdp");
  const LayoutConfig back = read_layout(layout_json(l, LayoutRecord::scenario), "$.layout", LayoutRecord::scenario);
  EXPECT_EQ(back.dp_sharding, DpSharding::zero2);
  EXPECT_EQ(back.expert_dp_sharding, DpSharding::fsdp);
  // the experts follow dp_sharding unless told
  const LayoutConfig ddp = read_layout({{"world", 2}, {"dp_shard", 2}, {"dp_sharding", "ddp"}}, "$.layout",
                                       LayoutRecord::scenario);
  EXPECT_EQ(ddp.expert_dp_sharding, DpSharding::ddp);
  EXPECT_EQ(describe_layout(ddp, LayoutText::stem), "ddp2");
  auto [path, rule] = refusal({{"dp_sharding", "zero3"}}, LayoutRecord::scenario, "$.resume.layout");
  EXPECT_EQ(path, "$.resume.layout.dp_sharding");
  EXPECT_EQ(rule, "expected one of \"fsdp\", \"ddp\", \"zero1\", \"zero2\", got string \"zero3\"");
  std::tie(path, rule) = refusal({{"expert_dp_sharding", 1}}, LayoutRecord::scenario, "$.layout");
  EXPECT_EQ(path, "$.layout.expert_dp_sharding");
}

// Where a parameter, its reduced gradient and its optimizer state live under each mode:
// dp_shard 4 x tp 2, a row-wise weight (8 rows): zero2's gradient is a shard of 2 rows on
// every rank, the parameter whole (8 rows), the optimizer state a shard.
TEST(LayoutConfig, DpShardingPlacesParamGradAndOptimizerState) {
  ModelConfig model;
  model.mlp_hidden = 32;
  ParamSpec w2;
  for (const ParamSpec& sp : param_specs(model))
    if (sp.family == Family::dense_mlp && sp.name.size() > 3 && sp.name.substr(sp.name.size() - 3) == ".w2") w2 = sp;
  ASSERT_FALSE(w2.name.empty());
  const int64_t rows = w2.shape[0] / 2;  // its TP chunk (row-wise)
  for (DpSharding mode : {DpSharding::fsdp, DpSharding::ddp, DpSharding::zero1, DpSharding::zero2}) {
    LayoutConfig l = make(1, 4, 1, 2, 1, 2);
    l.dp_sharding = l.expert_dp_sharding = mode;
    const mesh::Mesh m(l);
    const mesh::ParamPlacements where = mesh::param_placements(m, w2);
    const bool param_sharded = mode == DpSharding::fsdp;
    const bool grad_sharded = mode == DpSharding::fsdp || mode == DpSharding::zero2;
    const bool state_sharded = mode != DpSharding::ddp;
    for (int r = 0; r < m.world(); ++r) {
      const std::string at = std::string(dp_sharding_name(mode)) + " rank " + std::to_string(r);
      EXPECT_EQ(mesh::local_shape(m, mesh::param_layout(m, w2), w2.shape, r)[0], param_sharded ? rows / 4 : rows) << at;
      EXPECT_EQ(mesh::local_shape(m, where.grad, w2.shape, r)[0], grad_sharded ? rows / 4 : rows) << at;
      EXPECT_EQ(mesh::local_shape(m, where.optimizer, w2.shape, r)[0], state_sharded ? rows / 4 : rows) << at;
    }
    EXPECT_EQ(mesh::first_replica(m, where.grad, 2), grad_sharded) << dp_sharding_name(mode);
  }
}

// layout.recompute (docs/parallel.md, "Activation recompute"): a scenario key only, written and
// described only when it is not none (so every existing record and text stays as it was),
// refused with its path when unknown, and refused on world 1 (the baseline never recomputes).
TEST(LayoutConfig, RecomputeIsAScenarioKeyWordedOnlyWhenOn) {
  LayoutConfig l = make(1, 2, 1, 2, 4, 1);
  l.sp = true;
  const std::string full = describe_layout(l, LayoutText::full), report = describe_layout(l, LayoutText::report);
  const std::string brief = describe_layout(l, LayoutText::brief), stem = describe_layout(l, LayoutText::stem);
  const std::string off = layout_json(l, LayoutRecord::scenario).dump();
  EXPECT_EQ(off.find("recompute"), std::string::npos) << off;
  for (Recompute r : {Recompute::full, Recompute::attention, Recompute::mlp}) {
    l.recompute = r;
    const std::string name(recompute_name(r));
    EXPECT_EQ(describe_layout(l, LayoutText::full), full + ", recompute " + name);
    EXPECT_EQ(describe_layout(l, LayoutText::report), report + ", recompute " + name);
    EXPECT_EQ(describe_layout(l, LayoutText::brief), brief + ", recompute " + name);
    EXPECT_EQ(describe_layout(l, LayoutText::stem), stem + "_recompute_" + name);
    const nlohmann::ordered_json j = layout_json(l, LayoutRecord::scenario);
    EXPECT_EQ(j.at("recompute"), name);
    EXPECT_EQ(read_layout(nlohmann::json(j), "$.layout", LayoutRecord::scenario).recompute, r);
    EXPECT_EQ(layout_json(l, LayoutRecord::checkpoint).dump().find("recompute"), std::string::npos);
  }
  EXPECT_EQ(full, "world 4 = dp_replicate 1 x dp_shard 2 x tp 2, ep 4, etp 1, sp");
  auto [path, rule] = refusal({{"recompute", "selective"}}, LayoutRecord::scenario, "$.resume.layout");
  EXPECT_EQ(path, "$.resume.layout.recompute");
  EXPECT_EQ(rule, "expected one of \"none\", \"full\", \"attention\", \"mlp\", got string \"selective\"");
  std::tie(path, rule) = refusal(
      {{"world", 2}, {"dp_replicate", 1}, {"dp_shard", 2}, {"tp", 1}, {"ep", 1}, {"etp", 1}, {"recompute", "full"}},
      LayoutRecord::checkpoint, "$.mesh");
  EXPECT_EQ(path, "$.mesh.recompute");
  LayoutConfig one;
  one.recompute = Recompute::mlp;
  try {
    validate_layout(one, ModelConfig{});
    ADD_FAILURE() << "recompute on world 1 was not refused";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "$.layout.recompute");
    EXPECT_NE(e.rule().find("needs layout.world > 1"), std::string::npos) << e.rule();
  }
  one.recompute = Recompute::none;
  EXPECT_NO_THROW(validate_layout(one, ModelConfig{}));
}

// Every degree above 1 of every shipped layout is in its short form (the matrix table and
// summary.md), and so are its pipeline schedule, data-parallel sharding and recompute.
TEST(LayoutConfig, ShortFormOfEveryShippedScenarioNamesEveryDegree) {
  const std::string dir = std::string(PARITY_SOURCE_DIR) + "/scenarios";
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    const Scenario s = load_scenario(e.path().string());
    for (const LayoutConfig* l : {&s.layout, s.resume ? &s.resume->layout : nullptr}) {
      if (l == nullptr) continue;
      const std::string b = describe_layout(*l, LayoutText::brief);
      for (auto [word, v] : std::vector<std::pair<std::string, int64_t>>{
               {"dpr ", l->dp_replicate}, {"dps ", l->dp_shard}, {"cp ", l->cp}, {"tp ", l->tp}, {"ep ", l->ep},
               {"pp ", l->pp}})
        if (v > 1) {
          EXPECT_NE(b.find(word + std::to_string(v)), std::string::npos) << e.path() << ": " << b;
        }
      // the options a layout folds with: the pipeline schedule, the data-parallel sharding, recompute
      std::vector<std::string> named;
      if (l->pp > 1) named.emplace_back(pp_schedule_name(l->pp_schedule));
      if (l->dp_sharding != DpSharding::fsdp) named.emplace_back(dp_sharding_name(l->dp_sharding));
      if (l->expert_dp_sharding != l->dp_sharding) named.emplace_back(dp_sharding_name(l->expert_dp_sharding));
      if (l->recompute != Recompute::none) named.emplace_back(recompute_name(l->recompute));
      for (const std::string& w : named) EXPECT_NE(b.find(w), std::string::npos) << e.path() << ": " << b;
      EXPECT_NE(b.rfind(",", 0), 0u) << e.path() << ": " << b;
      ++checked;
    }
  }
  EXPECT_GE(checked, 90);
}

}  // namespace
}  // namespace parity::layout_config_test
