#include "parallel/reduction_plan.h"

#include <cstdio>

#include "core/error.h"

namespace parity {

namespace {

int64_t group_size(const mesh::Mesh& m, mesh::GroupKind k) {
  int64_t n = 1;
  for (mesh::MeshDim d : mesh::group_dims(k)) n *= m.size(d);
  return n;
}

}  // namespace

mesh::GroupKind home_dp_group(Family f) {
  return f == Family::routed_experts ? mesh::GroupKind::edp : mesh::GroupKind::dense_dp;
}

DpParts dp_parts(mesh::GroupKind dp_group) {
  using mesh::GroupKind;
  if (dp_group == GroupKind::dense_dp) return {GroupKind::dp_shard, GroupKind::dense_replicate};
  if (dp_group == GroupKind::edp) return {GroupKind::edp_shard, GroupKind::dp_replicate};
  throw Error("reduction plan: no data-parallel reduction over " + std::string(mesh::group_kind_name(dp_group)));
}

ReductionPlan reduction_plan(const mesh::Mesh& m, const ModelConfig& model, const Precision& precision) {
  ReductionPlan plan;
  plan.tp = m.size(mesh::MeshDim::tp);
  plan.ep = m.size(mesh::MeshDim::ep);
  plan.dense_dp = group_size(m, mesh::GroupKind::dense_dp);
  plan.compute = precision.compute;
  const bool sp = m.layout().sp;
  for (size_t i = 0; i < kFamilyCount; ++i) {
    const auto f = static_cast<Family>(i);
    FamilyReduction& e = plan[f];
    // TP-replicated parameters whose gradient is partitioned over the lanes (FOLDINGS.md):
    // the router always (each lane routes its own share of the tokens), LayerNorm under SP.
    e.tp_sum = plan.tp > 1 && (f == Family::router || (sp && f == Family::layernorm));
    e.tp_dtype = precision.reduce;
    e.dp_group = home_dp_group(f);
    e.dp_dtype = precision.reduce;
  }
  std::array<bool, kFamilyCount> has{};
  for (const ParamSpec& sp_ : param_specs(model)) has[static_cast<size_t>(sp_.family)] = true;
  for (size_t i = 0; i < kFamilyCount; ++i)
    if (has[i]) plan.present.push_back(static_cast<Family>(i));
  return plan;
}

// Each bug's effect, as the step had it written in place before the plan (docs/zoo.md has
// each one's record). Not mutations of the plan, and kept where they are: the micro-batch
// accumulation in bf16 (grad_accum_in_bf16, before any reduction), the token counts' sum
// (tokens_per_expert_local: bookkeeping, no gradient), the loss scalings (pmodel.cpp) and
// the optimizer's and the bias update's bugs: none of them is a reduction of a gradient.
const std::vector<std::string_view>& plan_mutations() {
  static const std::vector<std::string_view> names = {
      "sp_layernorm_not_summed", "tp_reduce_in_bf16",    "router_grad_averaged", "router_grad_summed_replicas",
      "dp_reduce_in_bf16",       "expert_grads_over_dense_dp", "expert_grads_times_tp", "dp_averaged_twice",
      "norm_counts_replicas",    "norm_drops_experts",   "norm_not_allreduced",  "clip_skips_experts",
      "sp_rmsnorm_not_summed"};
  return names;
}

bool apply_mutation(ReductionPlan& plan, std::string_view name) {
  FamilyReduction& router = plan[Family::router];
  FamilyReduction& experts = plan[Family::routed_experts];
  if (name == "sp_layernorm_not_summed" || name == "sp_rmsnorm_not_summed") {
    // the norms' gradients not summed over TP under SP: each lane keeps its chunk's part
    // (the layernorm family holds the norm weights, RMSNorm's included: one rule, two zoo
    // entries, each with a scenario of its norm)
    plan[Family::layernorm].tp_sum = false;
  } else if (name == "tp_reduce_in_bf16") {
    // the TP all-reduce in bf16 whatever the policy (pytorch#190626: FSDP2's reduce_dtype not
    // applied to it)
    for (auto& e : plan.families)
      if (e.tp_sum) e.tp_dtype = Low::bf16;
  } else if (name == "router_grad_averaged") {
    // averaged where each lane holds a part of the sum
    if (router.tp_sum) router.tp_scale = 1.0 / static_cast<double>(plan.tp);
  } else if (name == "router_grad_summed_replicas") {
    // the complete gate gradient summed over TP once more, as a hook for TP-replicated
    // parameters would (each lane already holds the whole sum)
    if (router.tp_sum) router.tp_sum_again = true;
  } else if (name == "dp_reduce_in_bf16") {
    // the data-parallel reduce-scatter in bf16 under an fp32 reduce policy
    for (auto& e : plan.families) e.dp_dtype = Low::bf16;
  } else if (name == "expert_grads_over_dense_dp") {
    // over the dense DP group, not EDP: the EP peers inside it hold other experts, whose
    // gradients get added in (the step sums the EDP result over ep too)
    if (plan.ep > 1) experts.dp_group = mesh::GroupKind::dense_dp;
  } else if (name == "expert_grads_times_tp") {
    experts.dp_scale = static_cast<double>(plan.tp);  // tp times too large
  } else if (name == "dp_averaged_twice") {
    // the dense gradients divided by the data-parallel size: an average on top of the loss's
    // division by the global token count
    for (size_t i = 0; i < kFamilyCount; ++i)
      if (home_dp_group(static_cast<Family>(i)) == mesh::GroupKind::dense_dp)
        plan.families[i].dp_op = DpOp::average, plan.families[i].dp_scale = 1.0 / static_cast<double>(plan.dense_dp);
  } else if (name == "norm_counts_replicas") {
    for (auto& e : plan.families)
      if (e.norm == NormCount::first_replica) e.norm = NormCount::every_replica;
  } else if (name == "norm_drops_experts") {
    experts.norm = NormCount::none;
  } else if (name == "norm_not_allreduced") {
    plan.norm_summed = false;  // the clipping norm from this rank's gradients only
  } else if (name == "clip_skips_experts") {
    experts.clip = false;
  } else {
    return false;
  }
  return true;
}

}  // namespace parity
