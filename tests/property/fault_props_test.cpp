// The suite can fail, and fails usefully: with a broken reduction injected
// (PARITY_FAULT=scale_grad:routed_experts:2, the harness doubles every routed-expert
// gradient a layout reports, as a doubled EDP reduction would) the gradient property must
// fail, shrink to a small case that still has a MoE layer, and leave that case as a
// scenario file that `parity run` replays (exit 1 with the fault, exit 0 without).
// Also: the generators only draw cases that can exist, and cover every folding mode.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <iostream>

#include "harness/scenario/scenario.h"
#include "mesh/mesh.h"
#include "properties.h"

namespace parity::property {
namespace {

rc::detail::TestResult check_with(int cases, uint64_t seed, void (*prop)(), bool shrink = true) {
  rc::detail::TestParams params;
  params.seed = seed, params.maxSuccess = cases, params.disableShrinking = !shrink;
  rc::detail::TestMetadata md;
  md.id = md.description = "programmatic";
  return rc::detail::checkTestable(prop, md, params);
}

TEST(PropertyFaults, DoubledExpertReductionIsFoundAndShrunkToAReplayableScenario) {
  const std::filesystem::path out = work_dir() / "fault-out";
  ::setenv("PARITY_PROPERTY_OUT", out.c_str(), 1);
  ::setenv("PARITY_FAULT", "scale_grad:routed_experts:2", 1);
  const auto result = check_with(30, 8, &prop_gradients);
  ::unsetenv("PARITY_FAULT");
  ::unsetenv("PARITY_PROPERTY_OUT");
  rc::detail::printResultMessage(result, std::cout);
  std::cout << "\n";
  ASSERT_TRUE(result.is<rc::detail::FailureResult>()) << "a doubled expert gradient went unnoticed";
  const std::filesystem::path file = out / "gradients.json";
  ASSERT_TRUE(std::filesystem::exists(file));
  std::cout << "shrunk case " << file << ":\n" << read_text(file);
  const Scenario s = load_scenario(file.string());
  EXPECT_EQ(s.layout.world, 2);               // shrunk to the smallest world
  EXPECT_EQ(s.model.moe_layers(), 1);         // kept what the bug needs: one MoE layer
  EXPECT_EQ(s.model.layers, 1);
  EXPECT_EQ(s.steps, 1);
  EXPECT_EQ(s.model.dtype, DType::f64);
  // The file replays: the fault fails it, the correct build passes it.
  ::setenv("PARITY_FAULT", "scale_grad:routed_experts:2", 1);
  const CaseRun bad = run_case(s, "replay_fault");
  ::unsetenv("PARITY_FAULT");
  EXPECT_EQ(bad.rc, 1) << bad.log;
  EXPECT_NE(bad.log.find("FAIL     grad              routed_experts"), std::string::npos) << bad.log;
  const CaseRun good = run_case(s, "replay_clean");
  EXPECT_EQ(good.rc, 0) << good.log;
}

// Runs `prop` (cases from `seed`, no shrinking: the first failure is enough) with the named
// injection on in every rank process it starts; returns the failure's description, or "" if
// every case passed.
std::string failure_with_injection(const char* inject, const char* out_name, int cases, uint64_t seed,
                                   void (*prop)()) {
  const std::filesystem::path out = work_dir() / out_name;
  ::setenv("PARITY_PROPERTY_OUT", out.c_str(), 1);
  ::setenv("PARITY_INJECT", inject, 1);  // the rank processes inherit it
  const auto result = check_with(cases, seed, prop, false);
  ::unsetenv("PARITY_INJECT");
  ::unsetenv("PARITY_PROPERTY_OUT");
  rc::detail::printResultMessage(result, std::cout);
  std::cout << "\n";
  rc::detail::FailureResult failure;
  return result.match(failure) ? failure.description : std::string();
}

// Property 7 can fail on a mistake made the same way on save and on load: with Adam's second
// moment saved from the first moment's buffer (the zoo's ckpt_v_from_m_buffer), the round trip
// alone is bitwise clean; the saved state against the state in memory is not.
TEST(PropertyFaults, CheckpointSavedFromTheWrongBufferFailsTheRoundTripProperty) {
  const std::string why =
      failure_with_injection("ckpt_v_from_m_buffer", "fault-ckpt-out", 12, 3, &prop_ckpt_round_trip);
  ASSERT_FALSE(why.empty()) << "v saved from m's buffer went unnoticed";
  EXPECT_NE(why.find("OFF optim.v "), std::string::npos) << why;
  EXPECT_EQ(why.find("DIFF "), std::string::npos)
      << "the round trip itself differed: this fault is meant to be invisible to it\n" << why;
}

// The clip property can fail on a clip applied to the wrong tensors: with the routed experts
// left out of the clipping (the zoo's clip_skips_experts) grad_norm and clip_coef match and
// only the parameters after a clipped step differ.
TEST(PropertyFaults, ClipAppliedToTheWrongTensorsFailsTheClipProperty) {
  const std::string why = failure_with_injection("clip_skips_experts", "fault-clip-out", 30, 5, &prop_grad_norm_clip);
  ASSERT_FALSE(why.empty()) << "a clip that skips the experts went unnoticed";
  EXPECT_NE(why.find("FAIL param routed_experts"), std::string::npos) << why;
  EXPECT_EQ(why.find("FAIL grad_norm"), std::string::npos) << why;
}

// In-process, no ranks: every drawn case passes the scenario schema, the layout rules and
// the runner's batch rule, so a property failure is never a generator bug.
void prop_drawn_cases_are_valid() {
  CaseSpec spec;
  spec.need_moe = *rc::gen::arbitrary<bool>(), spec.want_tp = *rc::gen::arbitrary<bool>();
  spec.draw_clip = *rc::gen::arbitrary<bool>();
  const Scenario s = *gen_case(spec);
  validate_scenario(s);
  validate_layout(s.layout, s.model);
  const auto& l = s.layout;
  RC_ASSERT(s.model.batch >= s.model.microbatches);  // any batch over dp, no empty micro-batch
  RC_ASSERT(s.model.batch <= 2 * s.model.microbatches * l.dp_replicate * l.dp_shard);
  const BatchShape bs = batch_shape(s.model, l);
  RC_CLASSIFY(bs.uneven, "uneven batch");
  RC_CLASSIFY(bs.empty_rank, "rank with no sequence");
  RC_ASSERT(l.world >= 2 && l.world <= 8);  // two pipeline stages only of a stage layout of 4 ranks at most
  RC_ASSERT(l.pp == 1 || (l.pp == 2 && l.world <= 8 &&
                           (l.pp_virtual == 1 || (s.model.microbatches % 2 == 0 && s.model.layers >= 4))));
  RC_CLASSIFY(l.pp > 1, "pipeline parallel");
  RC_CLASSIFY(l.dp_sharding != DpSharding::fsdp, "ddp or ZeRO");
  RC_ASSERT(!spec.need_moe || s.model.moe_layers() > 0);
  const Scenario back = parse_scenario(scenario_to_json(s), "");
  RC_ASSERT(scenario_to_json(back) == scenario_to_json(s));
}

// Property 7's pair: the model fits both the saving and the loading layout.
void prop_drawn_ckpt_cases_are_valid() {
  const CkptCase c = *gen_ckpt_case();
  validate_scenario(c.save);
  validate_layout(c.save.layout, c.save.model);
  validate_layout(c.load, c.save.model);
  RC_ASSERT(c.save.model.batch >= c.save.model.microbatches);  // any batch over either layout's dp
  RC_ASSERT(c.load.world >= 1 && c.load.world <= 8);
}

TEST(PropertyGenerators, DrawOnlyValidCheckpointPairs) {
  const auto result = check_with(1000, 2, &prop_drawn_ckpt_cases_are_valid);
  rc::detail::printResultMessage(result, std::cout);
  std::cout << "\n";
  EXPECT_TRUE(result.is<rc::detail::SuccessResult>());
}

// Each folding mode is drawn as a mode of its own: the classification of a drawn layout is
// the mode asked for (a cross-lane draw with tp 1 would really be dp2ep).
TEST(PropertyGenerators, LayoutsInModeAreOfThatMode) {
  for (int64_t w = 1; w <= 8; ++w)
    for (Folding f : {Folding::dense, Folding::dp2ep, Folding::tp2ep, Folding::cross_lane})
      for (const LayoutConfig& l : layouts_in_mode(w, f)) {
        EXPECT_EQ(folding_of(l), f) << "W" << w << " tp" << l.tp << " ep" << l.ep << " etp" << l.etp;
        EXPECT_EQ(l.world, l.dp_replicate * l.dp_shard * l.tp);
        EXPECT_EQ((l.world / l.dp_replicate) % (l.ep * l.etp), 0);
      }
  EXPECT_EQ(layouts_in_mode(2, Folding::cross_lane).size(), 0u);  // tp 2 and ep 2 = tp: tp2ep
  EXPECT_GT(layouts_in_mode(4, Folding::cross_lane).size(), 0u);  // tp 2, ep 4
}

// CI runs each property for RC_PARAMS' 15 cases from seed 20261122: those first 15 draws of
// every property's generator already hold every folding mode (the coverage line each
// property prints at exit shows it for the real runs).
TEST(PropertyGenerators, CiSeedReachesEveryFoldingModeInEveryProperty) {
  CaseSpec moe, tp, sgd, adam, clip;
  moe.need_moe = true, tp.want_tp = true, sgd.need_moe = sgd.sgd_lr1_one_step = true;
  adam.adam_family = true, clip.draw_clip = true;
  CaseSpec no_mpi;
  no_mpi.allow_mpi = false;
  for (const CaseSpec& spec : {CaseSpec{}, moe, tp, sgd, adam, clip, no_mpi}) {
    int folding[4] = {0, 0, 0, 0}, fsdp = 0, pp = 0, zero = 0;
    const auto draw = [&] {
      const Scenario s = *gen_case(spec);
      ++folding[static_cast<int>(folding_of(s.layout))];
      fsdp += fsdp_off_dim0(s.layout, s.model);
      pp += s.layout.pp > 1, zero += s.layout.dp_sharding != DpSharding::fsdp;
    };
    rc::detail::TestParams params;
    params.seed = 20261122, params.maxSuccess = 15;
    ASSERT_TRUE(rc::detail::checkTestable(draw, rc::detail::TestMetadata{}, params).is<rc::detail::SuccessResult>());
    std::cout << "15 draws: dense only " << folding[0] << ", dp2ep " << folding[1] << ", tp2ep " << folding[2]
              << ", cross-lane " << folding[3] << "; FSDP off dim 0 " << fsdp << "; pipeline " << pp
              << ", ddp or ZeRO " << zero << "\n";
    for (int f : folding) EXPECT_GE(f, 1);
    EXPECT_GE(fsdp, 1);
    EXPECT_GE(pp, 1);
    EXPECT_GE(zero, 1);
  }
}

TEST(PropertyGenerators, DrawOnlyValidCases) {
  const auto result = check_with(2000, 1, &prop_drawn_cases_are_valid);
  rc::detail::printResultMessage(result, std::cout);
  std::cout << "\n";
  EXPECT_TRUE(result.is<rc::detail::SuccessResult>());
}

// Over 1000 draws of the default generator every folding mode occurs, and so do uneven
// shards, empty shards, sequence parallel, fp32, mpi, MoE layers, uneven batches, ranks with
// no sequence of a micro-batch, the deepspeed rank order, etp outside {1, tp}, FSDP off
// dimension 0, context parallel and context parallel under the deepspeed order.
TEST(PropertyGenerators, CoverEveryFoldingModeAndShardShape) {
  int folding[4] = {0, 0, 0, 0}, uneven = 0, empty = 0, sp = 0, fp32 = 0, mpi = 0, moe = 0, uneven_batch = 0,
      empty_rank = 0, ds = 0, etp = 0, fsdp = 0, cp = 0, ds_cp = 0;
  const auto draw = [&] {
    const Scenario s = *gen_case(CaseSpec{});
    fsdp += fsdp_off_dim0(s.layout, s.model);
    const ShardShape sh = shard_shape(s);
    const BatchShape bs = batch_shape(s.model, s.layout);
    uneven_batch += bs.uneven, empty_rank += bs.empty_rank;
    ++folding[static_cast<int>(folding_of(s.layout))];
    ds += s.layout.order == RankOrder::deepspeed, etp += free_etp(s.layout);
    uneven += sh.uneven, empty += sh.empty, sp += s.layout.sp, fp32 += s.model.dtype == DType::f32;
    mpi += s.layout.backend == comm::Backend::mpi, moe += s.model.moe_layers() > 0, cp += s.layout.cp > 1;
    ds_cp += s.layout.cp > 1 && s.layout.order == RankOrder::deepspeed;
  };
  rc::detail::TestParams params;
  params.seed = 3, params.maxSuccess = 1000;
  ASSERT_TRUE(rc::detail::checkTestable(draw, rc::detail::TestMetadata{}, params).is<rc::detail::SuccessResult>());
  std::cout << "1000 draws: dense only " << folding[0] << ", dp2ep " << folding[1] << ", tp2ep " << folding[2]
            << ", cross-lane " << folding[3] << "; uneven " << uneven << ", empty shards " << empty << ", SP " << sp
            << ", fp32 " << fp32 << ", mpi " << mpi << ", MoE " << moe << "; uneven batch " << uneven_batch
            << ", rank with no sequence " << empty_rank << "; deepspeed order " << ds << ", etp not 1 or tp " << etp
            << ", FSDP off dim 0 " << fsdp << "; CP " << cp << ", CP with the deepspeed order " << ds_cp << "\n";
  for (int f : folding) EXPECT_GE(f, 50);
  EXPECT_GE(ds, 50);
  EXPECT_GE(etp, 50);
  EXPECT_GE(uneven, 300);
  EXPECT_GE(empty, 50);
  EXPECT_GE(sp, 100);
  EXPECT_GE(fp32, 50);
  EXPECT_GE(mpi, 20);
  EXPECT_GE(moe, 300);
  EXPECT_GE(uneven_batch, 100);  // 192 at seed 3
  EXPECT_GE(empty_rank, 75);     // 150 at seed 3
  EXPECT_GE(fsdp, 200);          // layout.fsdp_dim drawn in about half the cases
  EXPECT_GE(cp, 50);
  EXPECT_GE(ds_cp, 10);
}

}  // namespace
}  // namespace parity::property
