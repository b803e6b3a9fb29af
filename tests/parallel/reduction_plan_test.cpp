// The reduction plan (parallel/reduction_plan.h): the correct plan of hand-worked layouts,
// entry by entry, and each bug zoo mutation changing exactly the entries it should.
#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <string>

#include "core/inject.h"
#include "parallel/reduction_plan.h"

namespace parity {
// gtest prints a failed comparison of families by name
inline void PrintTo(Family f, std::ostream* os) { *os << family_name(f); }
namespace {

using mesh::GroupKind;

LayoutConfig layout(int64_t world, int64_t dp_replicate, int64_t dp_shard, int64_t tp, bool sp, int64_t ep = 1,
                    int64_t etp = 1, int64_t cp = 1) {
  LayoutConfig l;
  l.world = world, l.dp_replicate = dp_replicate, l.dp_shard = dp_shard, l.tp = tp, l.sp = sp;
  l.ep = ep, l.etp = etp, l.cp = cp;
  return l;
}

ReductionPlan plan_of(const LayoutConfig& l, Precision p = {}) {
  ModelConfig model;  // 2 layers, one MoE (4 experts), no shared expert
  return reduction_plan(mesh::Mesh(l), model, p);
}

// The families whose TP sum the plan runs.
std::set<Family> tp_summed(const ReductionPlan& plan) {
  std::set<Family> out;
  for (size_t i = 0; i < kFamilyCount; ++i)
    if (plan.families[i].tp_sum) out.insert(static_cast<Family>(i));
  return out;
}

// What every layout shares: a plain sum over the home group in the compute dtype, the first
// replica in the norm, every family clipped.
void expect_plain_dp(const ReductionPlan& plan) {
  for (size_t i = 0; i < kFamilyCount; ++i) {
    const auto f = static_cast<Family>(i);
    const FamilyReduction& e = plan[f];
    SCOPED_TRACE(std::string(family_name(f)));
    EXPECT_EQ(e.dp_group, f == Family::routed_experts ? GroupKind::edp : GroupKind::dense_dp);
    EXPECT_EQ(e.dp_op, DpOp::sum);
    EXPECT_EQ(e.dp_scale, 1.0);
    EXPECT_EQ(e.tp_scale, 1.0);
    EXPECT_FALSE(e.tp_sum_again);
    EXPECT_EQ(e.tp_dtype, Low::none);
    EXPECT_EQ(e.dp_dtype, Low::none);
    EXPECT_EQ(e.norm, NormCount::first_replica);
    EXPECT_TRUE(e.clip);
  }
  EXPECT_TRUE(plan.norm_summed);
}

TEST(ReductionPlan, Tp2SpSumsTheRouterAndLayerNormOverTp) {
  const ReductionPlan plan = plan_of(layout(2, 1, 1, 2, true));
  EXPECT_EQ(tp_summed(plan), (std::set<Family>{Family::layernorm, Family::router}));
  expect_plain_dp(plan);
  EXPECT_EQ(plan.tp, 2);
  EXPECT_EQ(plan.dense_dp, 1);
}

TEST(ReductionPlan, Tp2WithoutSpSumsTheRouterOnly) {
  EXPECT_EQ(tp_summed(plan_of(layout(2, 1, 1, 2, false))), (std::set<Family>{Family::router}));
}

TEST(ReductionPlan, Fsdp4Ep2HasNoTpSumAndExpertsOverEdp) {
  const ReductionPlan plan = plan_of(layout(4, 1, 4, 1, false, 2));
  EXPECT_TRUE(tp_summed(plan).empty());
  expect_plain_dp(plan);
  EXPECT_EQ(plan.dense_dp, 4);
  EXPECT_EQ(plan.ep, 2);
}

TEST(ReductionPlan, Hsdp2x2Tp2Ep2Etp2SumsTheRouterOverTpAndNothingOverEtp) {
  const ReductionPlan plan = plan_of(layout(8, 2, 2, 2, false, 2, 2));
  EXPECT_EQ(tp_summed(plan), (std::set<Family>{Family::router}));
  expect_plain_dp(plan);
  EXPECT_EQ(plan.dense_dp, 4);  // dp_replicate x dp_shard
  EXPECT_EQ(dp_parts(GroupKind::dense_dp).replicate, GroupKind::dense_replicate);
  EXPECT_EQ(dp_parts(GroupKind::edp).fsdp, GroupKind::edp_shard);
  EXPECT_EQ(dp_parts(GroupKind::edp).replicate, GroupKind::dp_replicate);
}

TEST(ReductionPlan, Cp2SumsOverDenseDpWhichHoldsCp) {
  const ReductionPlan plan = plan_of(layout(2, 1, 1, 1, false, 1, 1, 2));
  EXPECT_TRUE(tp_summed(plan).empty());
  expect_plain_dp(plan);
  EXPECT_EQ(plan.dense_dp, 2);  // the cp ranks' gradients are summed
}

TEST(ReductionPlan, ReducesInThePolicysReduceDtype) {
  const ReductionPlan plan = plan_of(layout(2, 1, 1, 2, true), {DType::f32, Low::bf16, Low::bf16});
  for (const FamilyReduction& e : plan.families) {
    EXPECT_EQ(e.tp_dtype, Low::bf16);
    EXPECT_EQ(e.dp_dtype, Low::bf16);
  }
  EXPECT_EQ(plan.compute, DType::f32);
}

TEST(ReductionPlan, PresentFamiliesFollowTheModel) {
  const ReductionPlan plan = plan_of(layout(1, 1, 1, 1, false));
  EXPECT_EQ(plan.present, (std::vector<Family>{Family::embedding, Family::attention, Family::layernorm,
                                                Family::router, Family::routed_experts, Family::dense_mlp,
                                                Family::head}));
}

// ---- the bug zoo's mutations ------------------------------------------------------------

// tp2 + sp, fsdp2, ep2: every mutation has something to change here.
ReductionPlan rich() { return plan_of(layout(4, 1, 2, 2, true, 2)); }

std::set<Family> changed(const ReductionPlan& a, const ReductionPlan& b) {
  std::set<Family> out;
  for (size_t i = 0; i < kFamilyCount; ++i)
    if (!(a.families[i] == b.families[i])) out.insert(static_cast<Family>(i));
  return out;
}

ReductionPlan mutated(std::string_view name) {
  ReductionPlan p = rich();
  EXPECT_TRUE(apply_mutation(p, name)) << name;
  return p;
}

const std::set<Family> kEvery = {Family::embedding,      Family::attention,      Family::layernorm, Family::router,
                                 Family::routed_experts, Family::shared_experts, Family::dense_mlp, Family::head};

TEST(ReductionPlanMutation, EachChangesExactlyItsEntries) {
  const ReductionPlan ok = rich();
  const std::set<Family> dense = [] {
    std::set<Family> d = kEvery;
    d.erase(Family::routed_experts);
    return d;
  }();
  const std::set<Family> experts = {Family::routed_experts}, router = {Family::router};
  const std::vector<std::pair<std::string_view, std::set<Family>>> expect = {
      {"sp_layernorm_not_summed", {Family::layernorm}},
      {"tp_reduce_in_bf16", {Family::layernorm, Family::router}},
      {"router_grad_averaged", router},
      {"router_grad_summed_replicas", router},
      {"dp_reduce_in_bf16", kEvery},
      {"expert_grads_over_dense_dp", experts},
      {"expert_grads_times_tp", experts},
      {"dp_averaged_twice", dense},
      {"norm_counts_replicas", kEvery},
      {"norm_drops_experts", experts},
      {"norm_not_allreduced", {}},
      {"clip_skips_experts", experts},
      {"sp_rmsnorm_not_summed", {Family::layernorm}}};
  ASSERT_EQ(expect.size(), plan_mutations().size());
  for (const auto& [name, families] : expect) {
    SCOPED_TRACE(std::string(name));
    const ReductionPlan bad = mutated(name);
    EXPECT_EQ(changed(ok, bad), families);
    EXPECT_EQ(bad.norm_summed, name != "norm_not_allreduced");
  }
}

TEST(ReductionPlanMutation, EachSetsItsValue) {
  EXPECT_FALSE(mutated("sp_layernorm_not_summed")[Family::layernorm].tp_sum);
  EXPECT_FALSE(mutated("sp_rmsnorm_not_summed")[Family::layernorm].tp_sum);
  EXPECT_EQ(mutated("tp_reduce_in_bf16")[Family::router].tp_dtype, Low::bf16);
  EXPECT_EQ(mutated("router_grad_averaged")[Family::router].tp_scale, 0.5);
  EXPECT_TRUE(mutated("router_grad_summed_replicas")[Family::router].tp_sum_again);
  EXPECT_EQ(mutated("dp_reduce_in_bf16")[Family::head].dp_dtype, Low::bf16);
  EXPECT_EQ(mutated("expert_grads_over_dense_dp")[Family::routed_experts].dp_group, GroupKind::dense_dp);
  EXPECT_EQ(mutated("expert_grads_times_tp")[Family::routed_experts].dp_scale, 2.0);
  const FamilyReduction twice = mutated("dp_averaged_twice")[Family::head];
  EXPECT_EQ(twice.dp_op, DpOp::average);
  EXPECT_EQ(twice.dp_scale, 0.5);  // 1 / dense_dp
  EXPECT_EQ(mutated("norm_counts_replicas")[Family::layernorm].norm, NormCount::every_replica);
  EXPECT_EQ(mutated("norm_drops_experts")[Family::routed_experts].norm, NormCount::none);
  EXPECT_FALSE(mutated("clip_skips_experts")[Family::routed_experts].clip);
}

TEST(ReductionPlanMutation, ChangesNothingWhereTheLayoutHasNothingToBreak) {
  const ReductionPlan ok = plan_of(layout(4, 1, 4, 1, false));  // no tp, no ep
  for (std::string_view name : {"sp_layernorm_not_summed", "sp_rmsnorm_not_summed", "tp_reduce_in_bf16",
                                "router_grad_averaged", "router_grad_summed_replicas", "expert_grads_over_dense_dp"}) {
    ReductionPlan p = ok;
    apply_mutation(p, name);
    EXPECT_TRUE(changed(ok, p).empty()) << name;
  }
}

TEST(ReductionPlanMutation, OtherBugsAreNoMutations) {
  for (std::string_view name : {"grad_accum_in_bf16", "tokens_per_expert_local", "bias_update_sign", "nonsense"}) {
    ReductionPlan p = rich();
    EXPECT_FALSE(apply_mutation(p, name)) << name;
    EXPECT_TRUE(changed(rich(), p).empty()) << name;
  }
}

TEST(ReductionPlanMutation, EveryMutationIsAZooInjection) {
  for (std::string_view name : plan_mutations()) EXPECT_NO_THROW(find_injection(name)) << name;
}

}  // namespace
}  // namespace parity
