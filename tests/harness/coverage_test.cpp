// Pairwise coverage (docs/coverage.md): modes and option values read from a scenario, the
// checker failing on a set that misses a pair, every layout-dependent pair found in some
// valid layout, the generator covering every pair, and the shipped matrix
// covering every pair (the test that fails naming each missing one).
#include "harness/scenario/coverage.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "harness/scenario/cover_gen.h"
#include "harness/scenario/scenario.h"

namespace parity::coverage::coverage_test {  // one namespace per file: the tests build as unity batches
namespace {

const std::string kScenarios = std::string(PARITY_SOURCE_DIR) + "/scenarios";  // shipped files

LayoutConfig layout(int64_t dpr, int64_t dps, int64_t tp, int64_t ep, int64_t etp, bool sp = false,
                    RankOrder order = RankOrder::megatron) {
  return {.world = dpr * dps * tp, .dp_replicate = dpr, .dp_shard = dps, .tp = tp, .ep = ep, .etp = etp, .sp = sp,
          .order = order};
}

Scenario with_layout(const LayoutConfig& l) {
  Scenario s = cover_template();
  s.layout = l;
  return s;
}

std::string names(const std::vector<Pair>& pairs) {
  std::string out;
  for (const Pair& p : pairs) out += "\n  " + pair_name(p);
  return out;
}

bool has(const std::vector<Pair>& v, const Pair& p) { return std::find(v.begin(), v.end(), p) != v.end(); }

TEST(Coverage, ModesAreReadFromTheDegrees) {
  using V = std::vector<Mode>;
  EXPECT_EQ(modes_of(layout(1, 1, 1, 1, 1)), V{});
  EXPECT_EQ(modes_of(layout(1, 1, 2, 1, 2)), (V{Mode::tp, Mode::etp}));
  EXPECT_EQ(modes_of(layout(1, 1, 2, 1, 1)), (V{Mode::tp}));
  EXPECT_EQ(modes_of(layout(1, 2, 2, 1, 2, true)), (V{Mode::fsdp, Mode::sp, Mode::etp}));
  EXPECT_EQ(modes_of(layout(2, 2, 1, 1, 1)), (V{Mode::fsdp, Mode::hsdp}));
  EXPECT_EQ(modes_of(layout(1, 1, 2, 2, 1)), (V{Mode::tp, Mode::tp2ep}));        // tp2_ep2
  EXPECT_EQ(modes_of(layout(1, 4, 1, 2, 1)), (V{Mode::fsdp, Mode::dp2ep}));      // fsdp4_ep2
  EXPECT_EQ(modes_of(layout(1, 4, 2, 4, 1)), (V{Mode::fsdp, Mode::tp, Mode::cross_lane}));  // w8_tp2_ep4
  EXPECT_EQ(modes_of(layout(2, 2, 2, 2, 2)), (V{Mode::fsdp, Mode::hsdp, Mode::tp, Mode::dp2ep, Mode::etp}));
  LayoutConfig pp2 = layout(1, 2, 1, 1, 1);
  pp2.pp = 2, pp2.world = 4;
  EXPECT_EQ(modes_of(pp2), (V{Mode::fsdp, Mode::pp}));
  LayoutConfig cp2 = layout(1, 2, 2, 2, 1, true);  // fsdp2_cp2_tp2_sp_ep2
  cp2.cp = 2, cp2.world = 8;
  EXPECT_EQ(modes_of(cp2), (V{Mode::fsdp, Mode::sp, Mode::tp2ep, Mode::cp}));
}

// The pipeline schedule takes a value only where pp > 1, the data-parallel sharding only where
// dp_shard > 1 and it is not fsdp (the default, which every fsdp layout covers).
TEST(Coverage, ScheduleAndShardingAreReadWhereTheyAct) {
  Scenario s = with_layout(layout(1, 2, 1, 1, 1));
  EXPECT_EQ(option_value(Option::schedule, s, s.layout), -1);
  EXPECT_EQ(option_value(Option::dp_sharding, s, s.layout), -1);
  s.layout.pp = 2, s.layout.world = 4, s.layout.dp_sharding = DpSharding::zero2;
  EXPECT_EQ(option_value(Option::schedule, s, s.layout), 1);  // 1f1b, the default
  EXPECT_EQ(option_value(Option::dp_sharding, s, s.layout), 2);
  s.layout.pp_schedule = PpSchedule::gpipe, s.layout.dp_sharding = DpSharding::ddp;
  EXPECT_EQ(option_value(Option::schedule, s, s.layout), 0);
  EXPECT_EQ(option_value(Option::dp_sharding, s, s.layout), 0);
  s.layout.dp_shard = 1, s.layout.dp_replicate = 2;  // no shard group: nothing to shard
  EXPECT_EQ(option_value(Option::dp_sharding, s, s.layout), -1);
  EXPECT_FALSE(possible({Option::microbatches, 0, Option::schedule, 2}));  // interleaved needs mb % pp == 0
  EXPECT_TRUE(possible({Option::microbatches, 1, Option::schedule, 2}));
}

TEST(Coverage, OptionValuesAreReadFromTheScenarioAndTheLayout) {
  Scenario s = with_layout(layout(1, 2, 2, 1, 2));
  EXPECT_EQ(option_value(Option::shared, s, s.layout), 1);
  EXPECT_EQ(option_value(Option::top_k, s, s.layout), 2);  // other
  EXPECT_EQ(option_value(Option::optim, s, s.layout), 1);  // adam
  EXPECT_EQ(option_value(Option::vocab_uneven, s, s.layout), -1);
  s.model.vocab = 61, s.model.top_k = 4, s.model.shared_experts = 0, s.model.shared_hidden = 17;
  EXPECT_EQ(option_value(Option::vocab_uneven, s, s.layout), 0);
  EXPECT_EQ(option_value(Option::vocab_uneven, s, layout(1, 4, 1, 1, 1)), -1);  // tp 1: even
  EXPECT_EQ(option_value(Option::top_k, s, s.layout), 1);                        // all
  EXPECT_EQ(option_value(Option::shared_uneven, s, s.layout), -1);               // no shared expert
  s.model.bias_rate = 0.001;  // top_k == experts: the update is 0, neither off nor on
  EXPECT_EQ(option_value(Option::bias, s, s.layout), -1);
  s.model.top_k = 2;
  EXPECT_EQ(option_value(Option::bias, s, s.layout), 1);
  s.model.dense_layers = s.model.layers;                                          // no MoE layer
  EXPECT_EQ(option_value(Option::shared, s, s.layout), -1);
  EXPECT_EQ(option_value(Option::dtype, s, s.layout), 1);
  EXPECT_EQ(option_value(Option::norm, s, s.layout), 0);  // layernorm, the default (issue 47)
  s.model.norm = NormKind::rmsnorm;
  EXPECT_EQ(option_value(Option::norm, s, s.layout), 1);
  EXPECT_EQ(option_value(Option::qk_norm, s, s.layout), 0);
  s.model.qk_norm = true;
  EXPECT_EQ(option_value(Option::qk_norm, s, s.layout), 1);
  EXPECT_EQ(option_value(Option::position, s, s.layout), 0);
  s.model.position = Position::rope;
  EXPECT_EQ(option_value(Option::position, s, s.layout), 1);
  // model.kv_heads, read against the layout's tp: all heads, fewer split over the lanes, replicated
  s.model.heads = 4;
  LayoutConfig tp1 = s.layout, tp2 = s.layout, tp4 = s.layout;
  tp1.tp = 1, tp2.tp = 2, tp4.tp = 4;
  EXPECT_EQ(option_value(Option::kv_heads, s, tp4), 0);
  s.model.kv_heads = 4;
  EXPECT_EQ(option_value(Option::kv_heads, s, tp4), 0);  // = heads: multi-head
  s.model.kv_heads = 2;
  EXPECT_EQ(option_value(Option::kv_heads, s, tp1), 1);
  EXPECT_EQ(option_value(Option::kv_heads, s, tp2), 1);
  EXPECT_EQ(option_value(Option::kv_heads, s, tp4), 2);
  s.model.kv_heads = 1;
  EXPECT_EQ(option_value(Option::kv_heads, s, tp2), 2);
}

TEST(Coverage, ResumeCountsBothLayoutsAndWorldOneNone) {
  Scenario s = with_layout(layout(1, 1, 1, 1, 1));
  EXPECT_TRUE(covered_pairs(s).empty());  // world 1: nothing compared
  s.steps = 6;
  s.resume = ResumeConfig{3, layout(1, 1, 2, 2, 1)};
  std::vector<Pair> got = covered_pairs(s);
  EXPECT_TRUE(has(got, {Option::resume, 0, Mode::tp2ep}));
  EXPECT_FALSE(has(got, {Option::resume, 0, Mode::fsdp}));
  s.layout = layout(1, 2, 1, 1, 1);
  got = covered_pairs(s);
  EXPECT_TRUE(has(got, {Option::resume, 0, Mode::fsdp}));
  EXPECT_TRUE(has(got, {Option::shared, 1, Mode::fsdp}));
}

// The checker can fail: a set where no run drops the shared expert under plain TP names
// that pair, and adding one scenario that has both removes it.
TEST(Coverage, CheckerNamesEveryMissingPair) {
  std::vector<Scenario> set{with_layout(layout(1, 1, 2, 1, 2))};  // tp2: shared expert on
  CoverageReport r = check_coverage(set);
  const Pair noshared_tp{Option::shared, 0, Mode::tp};
  EXPECT_TRUE(has(r.missing, noshared_tp));
  EXPECT_FALSE(has(r.missing, Pair{Option::shared, 1, Mode::tp}));
  const std::string text = format_coverage(r);
  EXPECT_NE(text.find("missing: shared=off x tp\n"), std::string::npos) << text;
  EXPECT_NE(text.find("missing: microbatches=>1 x hsdp\n"), std::string::npos) << text;
  Scenario noshared = with_layout(layout(1, 1, 2, 1, 1));
  noshared.model.shared_experts = 0;
  set.push_back(noshared);
  r = check_coverage(set);
  EXPECT_FALSE(has(r.missing, noshared_tp));
  EXPECT_EQ(r.pairs.size(), all_pairs().size());
}

// Which layouts the order flag counts: deepspeed where its expert groups differ from
// megatron's (docs/mesh.md's tables), never where tp = 1 or dp_shard = 1.
TEST(Coverage, OrderCountsOnlyWhereTheExpertGroupsDiffer) {
  const RankOrder ds = RankOrder::deepspeed;
  Scenario s = cover_template();
  EXPECT_EQ(option_value(Option::order, s, layout(1, 4, 2, 4, 1, false, ds)), 0);  // ds_w8_tp2_ep4: dp2ep
  EXPECT_EQ(modes_of(layout(1, 4, 2, 4, 1, false, ds)), (std::vector<Mode>{Mode::fsdp, Mode::tp, Mode::dp2ep}));
  EXPECT_EQ(option_value(Option::order, s, layout(1, 2, 2, 2, 2, false, ds)), 0);  // W4 TP2 EP2 ETP2: tp2ep
  EXPECT_EQ(modes_of(layout(1, 2, 2, 2, 2, false, ds)),
            (std::vector<Mode>{Mode::fsdp, Mode::tp, Mode::tp2ep, Mode::etp}));
  EXPECT_EQ(option_value(Option::order, s, layout(1, 4, 2, 4, 1)), -1);            // megatron
  EXPECT_EQ(option_value(Option::order, s, layout(1, 1, 4, 4, 1, false, ds)), -1);  // dp_shard 1: the same
  EXPECT_EQ(option_value(Option::order, s, layout(1, 8, 1, 4, 1, false, ds)), -1);  // tp 1: the same
  s.model.dense_layers = s.model.layers;                                            // no MoE layer
  EXPECT_EQ(option_value(Option::order, s, layout(1, 4, 2, 4, 1, false, ds)), -1);
}

// Every pair whose value depends on the layout (the four uneven flags, the order, the pipeline
// schedule and the data-parallel sharding) occurs in some valid layout up to world 16 (pp and cp 1 or 2), over
// every etp that tiles and both rank orders, with a model whose sizes are uneven under any degree > 1. So no pair
// is impossible (the
// other options take their value from the model alone; the generator test below finds a witness for every pair).
// Restricted to the layouts main allowed before issue 17 (etp 1 or tp, megatron order), expert_hidden%etp=uneven x
// tp2ep and x cross-lane do not occur: that was the old "impossible pair" rule.
TEST(Coverage, EveryLayoutDependentPairOccursInAValidLayout) {
  Scenario s = cover_template();
  s.model.heads = 8, s.model.experts = 8, s.model.vocab = 61;
  s.model.mlp_hidden = 31, s.model.expert_hidden = 17, s.model.shared_hidden = 17;
  std::set<Pair> seen, seen_old;
  int layouts = 0;
  // s, and s with each other schedule and data-parallel sharding where they act; false if invalid
  auto record = [&](const Scenario& x, bool old) {
    try {
      validate_scenario(x);
    } catch (const ConfigError&) {
      return false;
    }
    for (const Pair& p : covered_pairs(x)) {
      seen.insert(p);
      if (old) seen_old.insert(p);
    }
    return true;
  };
  for (int64_t pp : {1, 2})
    for (int64_t cp : {1, 2})
      for (int64_t dpr = 1; pp * cp * dpr <= 16; ++dpr)
        for (int64_t dps = 1; pp * cp * dpr * dps <= 16; ++dps)
          for (int64_t tp : {1, 2, 4, 8})
            for (int64_t ep : {1, 2, 4, 8})
              for (int64_t etp : {1, 2, 4, 8, 16})
                for (bool sp : {false, true})
                  for (RankOrder order : {RankOrder::megatron, RankOrder::deepspeed}) {
                    s.layout = layout(dpr, dps, tp, ep, etp, sp, order);
                    s.layout.pp = pp, s.layout.cp = cp, s.layout.world *= pp * cp;
                    if (s.layout.world > 16) continue;
                    const bool old = (etp == 1 || etp == tp) && order == RankOrder::megatron && pp == 1 && cp == 1;
                    if (!record(s, old)) continue;
                    ++layouts;
                    for (PpSchedule k : {PpSchedule::gpipe, PpSchedule::interleaved}) {
                      if (pp == 1) break;
                      Scenario t = s;
                      t.layout.pp_schedule = k, t.layout.pp_virtual = k == PpSchedule::interleaved ? 2 : 1;
                      t.model.layers = 4, t.model.microbatches = 2, t.model.batch = 8 * dpr * dps;
                      EXPECT_TRUE(record(t, false)) << pp_schedule_name(k);
                    }
                    for (DpSharding d : {DpSharding::ddp, DpSharding::zero1, DpSharding::zero2}) {
                      if (dps == 1) break;
                      Scenario t = s;
                      t.layout.dp_sharding = t.layout.expert_dp_sharding = d;
                      EXPECT_TRUE(record(t, false)) << dp_sharding_name(d);
                    }
                  }
  EXPECT_GT(layouts, 1000);
  for (Option o : {Option::vocab_uneven, Option::mlp_uneven, Option::expert_uneven, Option::shared_uneven,
                   Option::order})
    for (Mode m : all_modes()) EXPECT_TRUE(seen.count({o, 0, m})) << pair_name({o, 0, m}) << " occurs in no layout";
  for (Option o : {Option::schedule, Option::dp_sharding})
    for (int v = 0; v < 3; ++v)
      for (Mode m : all_modes()) EXPECT_TRUE(seen.count({o, v, m})) << pair_name({o, v, m}) << " occurs in no layout";
  for (Mode m : {Mode::tp2ep, Mode::cross_lane}) {
    EXPECT_FALSE(seen_old.count({Option::expert_uneven, 0, m})) << pair_name({Option::expert_uneven, 0, m});
  }
  EXPECT_TRUE(seen_old.count({Option::expert_uneven, 0, Mode::dp2ep}));
}

// From nothing, the generator covers every pair (a witness for each); every proposal is valid, splits its
// batch over micro-batches and data parallel (the runner's rule), and covers what it claims.
TEST(Coverage, GeneratorCoversEveryPossiblePairFromNothing) {
  const Proposals p = propose({});
  EXPECT_TRUE(p.left.empty()) << names(p.left);
  std::vector<Scenario> set;
  std::set<std::string> seen;
  for (const Proposal& x : p.scenarios) {
    SCOPED_TRACE(x.scenario.name);
    EXPECT_NO_THROW(validate_scenario(x.scenario));
    for (const LayoutConfig& l : compared_layouts(x.scenario))
      EXPECT_EQ(x.scenario.model.batch % (x.scenario.model.microbatches * l.dp_replicate * l.dp_shard), 0);
    EXPECT_FALSE(x.covers.empty() && x.option_covers.empty());
    for (const Pair& q : x.covers) EXPECT_TRUE(has(covered_pairs(x.scenario), q)) << pair_name(q);
    for (const OptionPair& q : x.option_covers) {
      const auto got = covered_option_pairs(x.scenario);
      EXPECT_TRUE(std::find(got.begin(), got.end(), q) != got.end()) << option_pair_name(q);
    }
    EXPECT_TRUE(seen.insert(x.scenario.name).second);
    EXPECT_EQ(x.scenario.name.rfind("pw_", 0), 0u);
    const ModelConfig& m = x.scenario.model;  // no check that cannot fire
    if (m.top_k == m.experts) {
      EXPECT_TRUE(m.aux_alpha == 0 && m.bias_rate == 0);
    }
    if (m.top_k == 1) {
      EXPECT_FALSE(m.route_norm && m.aux_alpha == 0) << "the router would get no gradient";
    }
    set.push_back(x.scenario);
  }
  EXPECT_TRUE(check_coverage(set).missing.empty()) << names(check_coverage(set).missing);
  EXPECT_TRUE(check_coverage(set).option_missing.empty()) << check_coverage(set).option_missing.size();
  EXPECT_TRUE(p.option_left.empty()) << p.option_left.size();
  EXPECT_GE(p.scenarios.size(), p.lower_bound);
  EXPECT_GE(p.lower_bound, 3u);  // top_k and optim have three values each
}

// Added to an incomplete set, the proposal completes it and names nothing the set has.
TEST(Coverage, GeneratorCompletesAnIncompleteSet) {
  Scenario tp2 = with_layout(layout(1, 1, 2, 1, 2));
  tp2.name = "tp2";
  const Proposals p = propose({tp2});
  std::vector<Scenario> set{tp2};
  for (const Proposal& x : p.scenarios) set.push_back(x.scenario);
  EXPECT_TRUE(check_coverage(set).missing.empty());
  EXPECT_TRUE(check_coverage(set).option_missing.empty());
  EXPECT_TRUE(p.left.empty());
}

// Written proposals read back as they were, in the shipped files' layout of keys.
TEST(Coverage, FileTextIsTheShippedStyleAndReadsBack) {
  for (const char* name : {"fsdp2_tp2_mb2_aux", "resume_tp2_to_w4_tp2_ep4", "ds_w8_tp2_ep4"}) {
    const std::string path = kScenarios + "/" + name + ".json";
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(scenario_file_text(load_scenario(path)), text.str()) << name;
  }
  Scenario s = with_layout(layout(2, 2, 2, 2, 2, true));
  s.name = "pw_x", s.steps = 6, s.model.dtype = DType::f32, s.optim.clip = 0.3;
  s.resume = ResumeConfig{3, layout(1, 1, 2, 2, 1)};
  const Scenario back = parse_scenario(nlohmann::json::parse(scenario_file_text(s)), "");
  EXPECT_EQ(scenario_to_json(back), scenario_to_json(s));
}

// The shipped matrix (scenarios/*.json, top level: what `parity matrix` runs) covers every
// pair. On failure: every missing pair, and how to propose scenarios for them.
TEST(Coverage, ShippedScenariosCoverEveryPossiblePair) {
  std::vector<Scenario> set;
  for (const std::string& f : scenario_files({kScenarios})) set.push_back(load_scenario(f));
  ASSERT_GT(set.size(), 40u);
  const CoverageReport r = check_coverage(set);
  EXPECT_TRUE(r.missing.empty()) << r.missing.size() << " pairs no shipped scenario covers:" << names(r.missing)
                                 << "\n(`parity cover` proposes scenarios for them; docs/coverage.md)";
  std::string omissing;
  for (const OptionPair& q : r.option_missing) omissing += "\n  " + option_pair_name(q);
  EXPECT_TRUE(r.option_missing.empty()) << r.option_missing.size()
                                        << " option x option pairs no shipped scenario covers:" << omissing
                                        << "\n(`parity cover --write scenarios` closes them)";
}

// Option x option pairs (issue 25): every two options' values, except what cannot co-occur;
// a scenario covers the pairs its options take together in each compared run.
TEST(Coverage, OptionPairsAreEveryTwoValuesTakenTogether) {
  const auto all = all_option_pairs();
  for (const OptionPair& q : all) EXPECT_LT(q.a, q.b) << option_pair_name(q);
  EXPECT_FALSE(possible({Option::bias, 1, Option::top_k, 1}));  // bias=on needs top_k < experts
  EXPECT_TRUE(possible({Option::bias, 1, Option::top_k, 0}));
  Scenario s = with_layout(layout(1, 1, 2, 1, 2));
  s.model.shared_experts = 0, s.optim.weight_decay = 0.1, s.model.route_scale = 2.5;
  const auto got = covered_option_pairs(s);
  auto has_op = [&](OptionPair q) { return std::find(got.begin(), got.end(), q) != got.end(); };
  EXPECT_TRUE(has_op({Option::shared, 0, Option::weight_decay, 1})) << "shared=off x weight_decay=on";
  EXPECT_TRUE(has_op({Option::weight_decay, 1, Option::route_scale, 1}));
  EXPECT_FALSE(has_op({Option::shared, 1, Option::weight_decay, 1}));
  EXPECT_EQ(option_pair_name({Option::shared, 0, Option::aux, 1}), "shared=off x aux=on");
}

}  // namespace
}  // namespace parity::coverage::coverage_test
