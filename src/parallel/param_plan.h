// The parameter plan (issue 44): one entry per parameter of the model, built once per run
// from the validated layout, the model and the precision policy, that the model
// (parallel/pmodel), the step (parallel/parallel_run), the checkpoint (through the run's
// layouts) and `parity explain` read. An entry holds
//   - where the parameter, its reduced gradient and its optimizer state live
//     (mesh::param_placements: the one place that reads layout.dp_sharding); the entry's
//     sharding mode, its model-parallel splits and its storage groups are derived from
//     those three placements, not decided again;
//   - the pipeline stages holding it and its tied partner's pair sync;
//   - its reductions in order: the TP sum, the data-parallel reduction, the pipeline pair
//     sync (parallel/reduction_plan.h has the family rules they come from);
//   - how it counts in the grad norm and whether it is clipped;
//   - its precision storage points.
// The bug zoo's placement and reduction bugs are mutations of the plan (apply_mutation), so a
// bug is a changed entry, printed by `parity explain` and unit-testable without a run.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/precision.h"
#include "mesh/mesh.h"
#include "mesh/placement.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/reduction_plan.h"
#include "parallel/sharded_param.h"

namespace parity {

// One model-parallel split of a parameter: tensor dimension `dim` chunked over mesh
// dimension `over` (tp; ep and etp for the routed experts), read off the parameter's
// placements. mp_chunks() gives a rank's piece.
struct MpSplit {
  int64_t dim;
  mesh::MeshDim over;
  bool operator==(const MpSplit&) const = default;
};

// Where one of an entry's tensors is stored over its home data-parallel group: sharded over
// the FSDP part (dp_shard; edp_shard for routed experts) and replicated over the replicate
// part, or (not sharded) replicated over the whole group.
struct Storage {
  bool sharded = true;
  mesh::GroupKind fsdp = mesh::GroupKind::dp_shard, replicate = mesh::GroupKind::dense_replicate;
  bool operator==(const Storage&) const = default;
};

// Tied embeddings under pipeline parallel: embed.weight held by the first and the last stage,
// its reduced gradient (or this rank's piece) summed over that pair after the data-parallel
// reduction, as Megatron's finalize_model_grads does.
struct PairSync {
  int64_t first = 0, last = 0;  // the two stages
  int times = 1;                // all-reduces over the pair (the zoo: 0 left out, 2 twice)
  // The zoo's pp_embedding_synced_after_dp (Megatron-LM#844): instead, the partner's gradient
  // as it stood before its data-parallel reduction added to this rank's reduced piece.
  bool adds_unreduced = false;
  bool operator==(const PairSync&) const = default;
};

struct ParamEntry {
  ParamSpec spec;
  mesh::TensorLayout param, grad, optimizer;  // mesh::param_placements
  DpSharding sharding = DpSharding::fsdp;     // read off the three placements
  std::vector<MpSplit> mp;                    // model-parallel splits, mesh dimension order
  mesh::GroupKind home = mesh::GroupKind::dense_dp;  // the data-parallel group its shards live over
  Storage param_storage, optimizer_storage;
  std::vector<int64_t> stages;  // the pipeline stages holding it (empty: every stage)
  FamilyReduction reduction;    // TP, DP, norm, clip: its family's (reduction_plan.h)
  bool pair_synced = false;     // tied: `pair` runs after the DP reduction
  PairSync pair;
  // The zoo's zero2_reduce_incomplete (DeepSpeed's ds_grad_is_ready class): the gradient taken
  // for the reduce-scatter before the last micro-batch's part is accumulated.
  bool reduced_before_last_micro = false;
  // Precision storage points (core/precision.h): the shards, the gradient accumulators and the
  // optimizer state are master values in `master`; the gathered compute copy is rounded to
  // `compute_copy` (none: kept in `master`).
  DType master = DType::f64;
  Low compute_copy = Low::none;
  // fp8 (core/fp8.h): the compute copy of a linear's weight quantized to E4M3, `fp8_blocks` tensors
  // (its routed experts, else 1) with one scale each (0: not quantized, model/params.h
  // fp8_weight_blocks), each scale from the amax over the lanes of `fp8_amax_over` (tp for the dense
  // linears, etp for the routed experts: the lanes that split it; none where that group is one lane).
  int64_t fp8_blocks = 0;
  std::optional<mesh::GroupKind> fp8_amax_over;

  bool zero() const { return sharding == DpSharding::zero1 || sharding == DpSharding::zero2; }
  bool zero2() const { return sharding == DpSharding::zero2; }
};

struct ParamPlan {
  std::vector<ParamEntry> entries;  // registry order (model/params.h)
  ReductionPlan families;           // the family rules the entries' reductions come from
  std::map<std::string, size_t, std::less<>> by_name;

  const ParamEntry& operator[](size_t p) const { return entries[p]; }
  size_t size() const { return entries.size(); }
  // The entry index of a parameter; throws Error naming it when the model has none.
  size_t index(std::string_view name) const;
  bool has(std::string_view name) const { return by_name.find(name) != by_name.end(); }
};

// The correct plan for this layout (a mesh of a validated layout), model and precision policy.
ParamPlan param_plan(const mesh::Mesh& m, const ModelConfig& model, const Precision& precision);

// A rank's model-parallel chunks of an entry: each split's {dim, size, this rank's coordinate}.
std::vector<MpChunk> mp_chunks(const ParamEntry& e, const mesh::Mesh& m, int rank);

// The bug zoo's placement and reduction bugs as mutations of the plan: the family rules'
// (reduction_plan.h plan_mutations) and the entries' own (the pipeline pair sync's three and
// zero2_reduce_incomplete). apply_mutation changes `plan` as bug `name` would and returns true,
// or returns false (plan untouched) when `name` is not one of them.
const std::vector<std::string_view>& param_plan_mutations();
bool apply_mutation(ParamPlan& plan, std::string_view name);
// The plan with every mutation the run's injected bugs name applied (core/inject.h).
ParamPlan with_injected(ParamPlan plan);

// The family table (plan_table) and one row per parameter: placements of the parameter, the
// gradient and the optimizer state, model-parallel splits, storage, stages, reductions in order.
std::string plan_table(const ParamPlan& plan);
// `only`: the parameters whose name contains it (explain's --param).
std::string param_table(const ParamPlan& plan, std::string_view only = {});

}  // namespace parity
