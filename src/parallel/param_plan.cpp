#include "parallel/param_plan.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/inject.h"
#include "mesh/param_layout.h"

namespace parity {

namespace {

// The view dimension FSDP shards over (dp_shard in the dense view, edp_shard in the expert one).
size_t fsdp_slot(const mesh::TensorLayout& l) {
  const auto& dims = mesh::view_dims(l.view);
  const mesh::MeshDim d = l.view == mesh::View::expert ? mesh::MeshDim::edp_shard : mesh::MeshDim::dp_shard;
  return static_cast<size_t>(std::find(dims.begin(), dims.end(), d) - dims.begin());
}

bool fsdp_sharded(const mesh::TensorLayout& l) { return l.placements.at(fsdp_slot(l)).is_shard(); }

// The mode the three placements say (mesh::param_placements wrote them from it).
DpSharding sharding_of(const mesh::ParamPlacements& p) {
  if (fsdp_sharded(p.param)) return DpSharding::fsdp;
  if (fsdp_sharded(p.grad)) return DpSharding::zero2;
  return fsdp_sharded(p.optimizer) ? DpSharding::zero1 : DpSharding::ddp;
}

// Sharded: over the home group's FSDP part, replicas over its replicate part; otherwise
// replicated over the whole home group.
Storage storage_of(const mesh::TensorLayout& l, mesh::GroupKind home) {
  const DpParts parts = dp_parts(home);
  if (fsdp_sharded(l)) return {true, parts.fsdp, parts.replicate};
  return {false, parts.fsdp, home};
}

// Every Shard placement on a model-parallel dimension (tp; ep, etp), in view order.
std::vector<MpSplit> mp_splits(const ParamSpec& spec, const mesh::TensorLayout& l) {
  std::vector<MpSplit> out;
  const auto& dims = mesh::view_dims(l.view);
  for (size_t k = 0; k < dims.size(); ++k) {
    const mesh::MeshDim d = dims[k];
    if (d != mesh::MeshDim::tp && d != mesh::MeshDim::ep && d != mesh::MeshDim::etp) continue;
    const mesh::Placement& p = l.placements.at(k);
    if (p.kind == mesh::PlacementKind::replicate) continue;
    if (p.kind != mesh::PlacementKind::shard)
      throw Error("param plan: " + spec.name + " is " + mesh::placement_str(p) + " over " +
                  std::string(mesh::dim_name(d)) + ": a model-parallel split is a Shard");
    out.push_back({p.dim, d});
  }
  return out;
}

bool is_qk_norm(const ParamSpec& spec) {
  return spec.name.ends_with(".attn.q_norm.weight") || spec.name.ends_with(".attn.k_norm.weight");
}

// A key / value projection replicated over tp (model.kv_heads < tp: mesh/param_layout.cpp).
bool is_shared_kv(const ParamSpec& spec, int64_t tp) { return spec.kv_heads > 0 && spec.kv_heads < tp; }

// An entry's reductions: its family's rule (reduction_plan.h), except
// - the QK-norm weights (model.qk_norm, issue 47): replicated over TP as every norm weight, but
//   each lane normalises only its own heads, so their gradient is a partial sum over the TP
//   lanes with or without SP (the router's case, not LayerNorm's): summed over tp wherever tp > 1;
// - wk and wv with fewer KV heads than TP lanes (grouped-query attention): each head is
//   replicated over the tp / kv_heads lanes whose query heads share it, and each of those lanes
//   holds its query heads' part of the head's gradient (zero in every other head's columns):
//   summed over the lanes sharing the head, which the TP all-reduce is (the others add exact 0).
FamilyReduction entry_reduction(const ReductionPlan& families, const ParamSpec& spec) {
  FamilyReduction r = families[spec.family];
  if (is_qk_norm(spec)) r.tp_sum = families.tp > 1;
  if (is_shared_kv(spec, families.tp)) r.tp_sum = true, r.tp_sharers = families.tp / spec.kv_heads;
  return r;
}

}  // namespace

size_t ParamPlan::index(std::string_view name) const {
  const auto it = by_name.find(name);
  if (it == by_name.end()) throw Error("param plan: the model has no parameter " + std::string(name));
  return it->second;
}

ParamPlan param_plan(const mesh::Mesh& m, const ModelConfig& model, const Precision& precision) {
  ParamPlan plan;
  plan.families = reduction_plan(m, model, precision);
  for (const ParamSpec& spec : param_specs(model)) {
    ParamEntry e;
    e.spec = spec;
    const mesh::ParamPlacements where = mesh::param_placements(m, spec);
    e.param = where.param, e.grad = where.grad, e.optimizer = where.optimizer;
    e.sharding = sharding_of(where);
    e.mp = mp_splits(spec, e.param);
    e.home = home_dp_group(spec.family);
    e.param_storage = storage_of(e.param, e.home), e.optimizer_storage = storage_of(e.optimizer, e.home);
    e.stages = e.param.stages;
    e.reduction = entry_reduction(plan.families, spec);
    // tied embeddings held by the first and the last stage: their gradients summed over the pair
    e.pair_synced = spec.also_head && e.stages.size() == 2;
    if (e.pair_synced) e.pair = {e.stages.front(), e.stages.back(), 1, false};
    e.master = precision.compute, e.compute_copy = precision.store;
    if (precision.fp8) e.fp8_blocks = fp8_weight_blocks(spec);
    const bool routed = spec.family == Family::routed_experts;
    if (e.fp8_blocks > 0 && m.size(routed ? mesh::MeshDim::etp : mesh::MeshDim::tp) > 1)
      e.fp8_amax_over = routed ? mesh::GroupKind::etp : mesh::GroupKind::tp;
    plan.by_name.emplace(spec.name, plan.entries.size());
    plan.entries.push_back(std::move(e));
  }
  return plan;
}

std::vector<MpChunk> mp_chunks(const ParamEntry& e, const mesh::Mesh& m, int rank) {
  std::vector<MpChunk> out;
  for (const MpSplit& s : e.mp) out.push_back({s.dim, m.size(s.over), m.coord(s.over, rank)});
  return out;
}

// The family rules' mutations (reduction_plan.h), then the entries' own: the pipeline pair
// sync's (each was a switch of the step before the plan) and zero2's early reduce-scatter.
const std::vector<std::string_view>& param_plan_mutations() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> n = plan_mutations();
    for (std::string_view e : {"pp_tied_embedding_not_synced", "pp_embedding_synced_twice",
                               "pp_embedding_synced_after_dp", "zero2_reduce_incomplete", "qk_norm_not_summed_tp",
                               "kv_grad_not_summed_shared", "kv_grad_summed_tp_times", "outer_compute_copy_unrounded"})
      n.push_back(e);
    return n;
  }();
  return names;
}

bool apply_mutation(ParamPlan& plan, std::string_view name) {
  if (apply_mutation(plan.families, name)) {
    for (ParamEntry& e : plan.entries) e.reduction = entry_reduction(plan.families, e.spec);
    return true;
  }
  if (name == "qk_norm_not_summed_tp") {  // the QK-norm weights left out of the TP sum: each lane keeps its heads' part
    for (ParamEntry& e : plan.entries)
      if (is_qk_norm(e.spec)) e.reduction.tp_sum = false;
    return true;
  }
  // grouped-query attention with KV heads replicated over tp: the sharing lanes' parts of a
  // head's gradient left unsummed (each lane keeps its own query heads' part), or summed and
  // then summed over tp again (each head's gradient x tp)
  if (name == "kv_grad_not_summed_shared" || name == "kv_grad_summed_tp_times") {
    for (ParamEntry& e : plan.entries)
      if (is_shared_kv(e.spec, plan.families.tp)) {
        if (name == "kv_grad_not_summed_shared") e.reduction.tp_sum = false;
        else e.reduction.tp_sum_again = true;
      }
    return true;
  }
  if (name == "pp_tied_embedding_not_synced") {  // the all-reduce over the pair left out
    for (ParamEntry& e : plan.entries)
      if (e.pair_synced) e.pair.times = 0;
  } else if (name == "pp_embedding_synced_twice") {
    for (ParamEntry& e : plan.entries)
      if (e.pair_synced && e.pair.times > 0) e.pair.times = 2;
  } else if (name == "pp_embedding_synced_after_dp") {
    for (ParamEntry& e : plan.entries)
      if (e.pair_synced) e.pair.adds_unreduced = true;
  } else if (name == "zero2_reduce_incomplete") {
    for (ParamEntry& e : plan.entries) e.reduced_before_last_micro = e.zero2();
  } else if (name == "outer_compute_copy_unrounded") {  // the embedding, final norm and head computed from masters
    for (ParamEntry& e : plan.entries)
      if (!e.spec.name.starts_with("layers.")) e.compute_copy = Low::none;
  } else {
    return false;
  }
  return true;
}

ParamPlan with_injected(ParamPlan plan) {
  for (std::string_view name : param_plan_mutations())
    if (injected(name)) apply_mutation(plan, name);
  return plan;
}

namespace {

std::string entry_low_name(Low l, DType compute) { return std::string(low_name(l, compute)); }

std::string entry_factor(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

std::string_view entry_norm_name(NormCount n) {
  switch (n) {
    case NormCount::first_replica: return "first replica";
    case NormCount::every_replica: return "every replica";
    case NormCount::none: return "not counted";
  }
  return "?";
}

std::string tp_words(const FamilyReduction& e) {
  if (!e.tp_sum) return "-";
  std::string tp = e.tp_sharers > 0 ? "sum over the " + std::to_string(e.tp_sharers) + " tp lanes sharing each KV head"
                                    : "sum over tp";
  if (e.tp_scale != 1.0) tp += " x" + entry_factor(e.tp_scale);
  if (e.tp_sum_again) tp += ", summed again";
  return tp;
}

std::string dp_words(const FamilyReduction& e, DpSharding s) {
  std::string op = e.dp_op == DpOp::sum ? "sum" : "average";
  if (e.dp_scale != 1.0) op += " x" + entry_factor(e.dp_scale);
  if (s == DpSharding::ddp) op += " (ddp: all-reduce)";
  if (s == DpSharding::zero1) op += " (zero1: all-reduce; optimizer on the shard, all-gather)";
  if (s == DpSharding::zero2) op += " (zero2: reduce-scatter; optimizer on the shard, all-gather)";
  return op;
}

}  // namespace

std::string plan_table(const ParamPlan& plan) {
  const ReductionPlan& fam = plan.families;
  std::string out =
      "| family | TP reduction | DP group | DP op | dtype (TP, DP) | grad norm | clip |\n"
      "|---|---|---|---|---|---|---|\n";
  for (Family f : fam.present) {
    const FamilyReduction& e = fam[f];
    const auto first = std::find_if(plan.entries.begin(), plan.entries.end(),
                                    [f](const ParamEntry& p) { return p.spec.family == f; });
    const DpSharding s = first == plan.entries.end() ? DpSharding::fsdp : first->sharding;
    const std::string dtype =
        (e.tp_sum ? entry_low_name(e.tp_dtype, fam.compute) : "-") + ", " + entry_low_name(e.dp_dtype, fam.compute);
    out += "| " + std::string(family_name(f)) + " | " + tp_words(e) + " | " +
           std::string(mesh::group_kind_name(e.dp_group)) + " | " + dp_words(e, s) + " | " + dtype + " | " +
           std::string(entry_norm_name(e.norm)) + " | " + (e.clip ? "yes" : "no") + " |\n";
  }
  out += "\nThe grad norm's squares are summed over ";
  out += fam.norm_summed ? "the world" : "this rank only";
  out += "; a DP sum adds contributions already divided by the global token count B*S.\n";
  return out;
}

namespace {

std::string storage_words(const Storage& s) {
  if (!s.sharded) return "whole over " + std::string(mesh::group_kind_name(s.replicate));
  return "shard over " + std::string(mesh::group_kind_name(s.fsdp)) + ", x " +
         std::string(mesh::group_kind_name(s.replicate));
}

std::string mp_words(const std::vector<MpSplit>& mp) {
  if (mp.empty()) return "-";
  std::string out;
  for (const MpSplit& s : mp)
    out += (out.empty() ? "" : ", ") + std::string("dim ") + std::to_string(s.dim) + " / " +
           std::string(mesh::dim_name(s.over));
  return out;
}

std::string reduction_words(const ParamEntry& e) {
  std::string out;
  if (e.reduction.tp_sum) out += "1. tp " + tp_words(e.reduction) + "; ";
  out += std::string(out.empty() ? "1" : "2") + ". " + std::string(mesh::group_kind_name(e.reduction.dp_group)) +
         " " + dp_words(e.reduction, e.sharding);
  if (e.reduced_before_last_micro) out += " before the last micro-batch";
  if (e.pair_synced) {
    out += "; then stages " + std::to_string(e.pair.first) + "+" + std::to_string(e.pair.last) + " sum x" +
           std::to_string(e.pair.times);
    if (e.pair.adds_unreduced) out += " (the partner's unreduced gradient)";
  }
  return out;
}

// fp8's weight quantization, after the compute copy's format: ", E4M3 x2 (amax over etp)".
std::string fp8_words(const ParamEntry& e) {
  if (e.fp8_blocks == 0) return "";
  const std::string over = e.fp8_amax_over ? " (amax over " + std::string(mesh::group_kind_name(*e.fp8_amax_over)) + ")"
                                           : "";
  return ", E4M3 x" + std::to_string(e.fp8_blocks) + over;
}

}  // namespace

std::string param_table(const ParamPlan& plan, std::string_view only) {
  std::string out =
      "| parameter | param | grad | optimizer | mp splits | storage (param; optimizer) | reductions | norm, clip "
      "| master, compute copy |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const ParamEntry& e : plan.entries) {
    if (e.spec.name.find(only) == std::string::npos) continue;
    const std::string grad = e.grad == e.param ? "=" : mesh::layout_str(e.grad);
    const std::string opt = e.optimizer == e.param ? "=" : mesh::layout_str(e.optimizer);
    const std::string st = e.optimizer_storage == e.param_storage
                               ? storage_words(e.param_storage)
                               : storage_words(e.param_storage) + "; " + storage_words(e.optimizer_storage);
    out += "| " + e.spec.name + " | " + mesh::layout_str(e.param) + " | " + grad + " | " + opt + " | " +
           mp_words(e.mp) + " | " + st + " | " + reduction_words(e) + " | " +
           std::string(entry_norm_name(e.reduction.norm)) + ", " + (e.reduction.clip ? "clipped" : "not clipped") +
           " | " +
           std::string(dtype_name(e.master)) + ", " + entry_low_name(e.compute_copy, e.master) + fp8_words(e) +
           " |\n";
  }
  return out;
}

}  // namespace parity
