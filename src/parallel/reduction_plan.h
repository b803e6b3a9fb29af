// The reduction plan (issue 27): for each parameter family, what happens to its gradient
// between the backward and the optimizer, beside the placements (mesh/param_layout.h) that
// say where its elements live. The step (parallel_run.cpp) executes the plan and decides
// nothing itself:
//
//   1. DP: the gradient is reduced over its data-parallel group (dense_dp: dp_shard x
//      dp_replicate x cp for the dense families; edp: edp_shard x dp_replicate for the
//      routed experts), a reduce-scatter over the FSDP part and an all-reduce over the
//      replicate part, each unit in one flat collective, rounded to the entry's dtype before
//      and after. A sum: the loss is already divided by the global token count B·S
//      (docs/design/foldings.md), so every data-parallel contribution adds.
//   2. TP: a TP-replicated family whose gradient is partitioned over the lanes (each lane
//      saw its share of the tokens: the router always when tp > 1, LayerNorm under SP) is
//      summed over the tp group, every such gradient (this rank's DP-reduced piece) in one flat
//      all-reduce, rounded to the entry's dtype before and after; then scaled. After DP, as
//      Megatron-LM's finalize_model_grads: one all-reduce inside the TP group is the last
//      reduction, so the lanes' replicas get the same bits whatever order each lane's DP
//      communicator summed in (NCCL's depends on the offset: docs/comm.md "NCCL's order").
//   3. The global grad norm: each element once (its first replica), summed over the world.
//   4. Clipping by the global norm.
//
// reduction_plan() builds the family rules of the correct plan; apply_mutation() applies the
// bug zoo's reduction bugs (core/inject.h) to them as mutations. parallel/param_plan.h copies
// each family's entry into every parameter's entry (where the step reads it), applies the
// mutations of the injected bugs and prints the table.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/precision.h"
#include "mesh/mesh.h"
#include "model/config.h"
#include "model/params.h"

namespace parity {

enum class DpOp { sum, average };
// Which replicas of an element enter the grad norm: its first replica only (each element
// once), every replica, or none (the family is left out).
enum class NormCount { first_replica, every_replica, none };

struct FamilyReduction {
  // 2. TP (after DP)
  bool tp_sum = false;        // summed over the tp group (partitioned over the lanes)
  double tp_scale = 1.0;      // applied after the TP sum
  bool tp_sum_again = false;  // summed over tp once more after the scale (a bug only)
  // > 0: a key / value head replicated over this many consecutive lanes (model.kv_heads < tp),
  // its gradient summed over them: the tp all-reduce, where every other lane adds an exact 0
  int64_t tp_sharers = 0;
  Low tp_dtype = Low::none;   // the TP all-reduce's dtype (none: the compute dtype)
  // 1. DP
  mesh::GroupKind dp_group = mesh::GroupKind::dense_dp;
  DpOp dp_op = DpOp::sum;
  double dp_scale = 1.0;      // applied after the reduction (1/|group| for an average)
  Low dp_dtype = Low::none;
  // 3, 4
  NormCount norm = NormCount::first_replica;
  bool clip = true;
  bool operator==(const FamilyReduction&) const = default;
};

struct ReductionPlan {
  std::array<FamilyReduction, kFamilyCount> families{};  // Family order
  std::vector<Family> present;  // the families the model has, Family order (what explain prints)
  bool norm_summed = true;      // the grad norm's squares summed over the world (else: this rank's)
  DType compute = DType::f64;   // what a Low::none reduction runs in (the policy's compute dtype)
  int64_t tp = 1, ep = 1, dense_dp = 1;  // the group sizes the entries' factors come from

  FamilyReduction& operator[](Family f) { return families[static_cast<size_t>(f)]; }
  const FamilyReduction& operator[](Family f) const { return families[static_cast<size_t>(f)]; }
};

// The data-parallel group a family's shards live over (its FSDP and replicate groups are
// dp_parts() of it): edp for the routed experts, dense_dp for every other family.
mesh::GroupKind home_dp_group(Family f);
struct DpParts {
  mesh::GroupKind fsdp, replicate;
};
// dense_dp: dp_shard, then dense_replicate (dp_replicate x cp: the cp ranks hold the same
// parameters and saw other tokens); edp: edp_shard, then dp_replicate (the expert view has
// no cp, edp_shard absorbs it). Throws Error for any other group.
DpParts dp_parts(mesh::GroupKind dp_group);
// The correct plan for this layout, model and precision policy (its reduce dtype).
ReductionPlan reduction_plan(const mesh::Mesh& m, const ModelConfig& model, const Precision& precision);

// The bug zoo's reduction bugs as mutations of a plan, in the order with_injected applies
// them. apply_mutation changes `plan` as bug `name` would and returns true, or returns false
// (plan untouched) when `name` is not one of them.
const std::vector<std::string_view>& plan_mutations();
bool apply_mutation(ReductionPlan& plan, std::string_view name);
}  // namespace parity
