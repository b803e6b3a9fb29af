// What each bug of the zoo needs of a shape (cli/zoo_shape.h). Each entry reads the place in
// src/ where its bug lives (core/inject.h `where`): the condition under which that code runs and
// changes a number. A wrong "cannot act" shows when --check-cannot runs the pair (it must pass);
// a wrong "can act" shows as an escape.
#include "cli/zoo_shape.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace parity::cli {

namespace {

using Need = std::function<std::string(const Scenario&)>;  // "" when met, else "needs ... (here ...)"

std::string num(int64_t v) { return std::to_string(v); }

Need need(std::function<bool(const Scenario&)> ok, std::string what, std::function<std::string(const Scenario&)> here) {
  return [=](const Scenario& s) { return ok(s) ? std::string() : "needs " + what + " (here " + here(s) + ")"; };
}

int64_t dense_dp(const Scenario& s) { return s.layout.dp_replicate * s.layout.dp_shard * s.layout.cp; }
int64_t stage_world(const Scenario& s) { return s.layout.world / s.layout.pp; }
bool is_moe(const Scenario& s) { return s.model.moe_layers() > 0 && s.model.experts > 0; }
bool adam(const Scenario& s) { return s.optim.kind != OptimKind::sgd; }

const Need tp2 = need([](const Scenario& s) { return s.layout.tp >= 2; }, "tp >= 2",
                      [](const Scenario& s) { return "tp " + num(s.layout.tp); });
const Need sp =
    need([](const Scenario& s) { return s.layout.sp; }, "sequence parallel", [](auto&) { return "sp off"; });
const Need no_sp = need([](const Scenario& s) { return !s.layout.sp; }, "tp without sequence parallel (each lane "
                        "routing its share of the replicated tokens)", [](auto&) { return "sp on"; });
const Need moe = need(is_moe, "an MoE layer", [](auto&) { return "every layer dense"; });
const Need mb2 = need([](const Scenario& s) { return s.model.microbatches >= 2; }, "micro-batches >= 2",
                      [](const Scenario& s) { return num(s.model.microbatches); });
const Need dp2 = need([](const Scenario& s) { return dense_dp(s) >= 2; }, "a data-parallel reduction "
                      "(dp_replicate x dp_shard x cp >= 2)", [](const Scenario& s) { return num(dense_dp(s)); });
const Need cp2 = need([](const Scenario& s) { return s.layout.cp >= 2; }, "cp >= 2",
                      [](const Scenario& s) { return "cp " + num(s.layout.cp); });
const Need pp2 = need([](const Scenario& s) { return s.layout.pp >= 2; }, "pp >= 2",
                      [](const Scenario& s) { return "pp " + num(s.layout.pp); });
const Need pp1 = need([](const Scenario& s) { return s.layout.pp == 1; }, "pp 1 (the code runs in the loop "
                      "without a pipeline; the pipeline schedule accumulates elsewhere)",
                      [](const Scenario& s) { return "pp " + num(s.layout.pp); });
const Need ep2 = need([](const Scenario& s) { return s.layout.ep >= 2; }, "ep >= 2",
                      [](const Scenario& s) { return "ep " + num(s.layout.ep); });
const Need world2 = need([](const Scenario& s) { return stage_world(s) >= 2; }, "more than one rank per stage",
                         [](const Scenario& s) { return num(stage_world(s)); });
const Need aux = need([](const Scenario& s) { return s.model.aux_alpha > 0 && s.model.top_k < s.model.experts; },
                      "the balance loss (aux_alpha > 0, top_k < experts)", [](auto&) { return "it cannot act"; });
const Need bias = need([](const Scenario& s) { return s.model.bias_rate > 0 && s.model.top_k < s.model.experts; },
                       "the expert-bias update (bias_rate > 0, top_k < experts)", [](auto&) { return "none"; });
const Need clip = need([](const Scenario& s) { return s.optim.clip > 0; }, "gradient clipping (optim.clip > 0)",
                       [](auto&) { return "clip 0"; });
const Need qknorm = need([](const Scenario& s) { return s.model.qk_norm; }, "QK-norm (model.qk_norm rmsnorm)",
                         [](auto&) { return "qk_norm off"; });
const Need kv_shared = need([](const Scenario& s) { return s.model.kv() < s.layout.tp; },
                            "KV heads replicated over tp (model.kv_heads < layout.tp)",
                            [](const Scenario& s) { return "kv_heads " + num(s.model.kv()) + " >= tp"; });
const Need rope = need([](const Scenario& s) { return s.model.position == Position::rope; },
                       "rotary positions (model.position rope)", [](auto&) { return "position none"; });
const Need cp_balanced = need([](const Scenario& s) { return s.layout.cp_order == CpOrder::balanced; },
                              "the load-balanced cp order (layout.cp_order balanced, cp > 1)",
                              [](auto&) { return "cp_order contiguous"; });
const Need adam_state = need(adam, "an optimizer with moments (adam, adamw)", [](auto&) { return "sgd"; });
const Need resume = need([](const Scenario& s) { return s.resume.has_value(); }, "a save-and-resume phase",
                         [](auto&) { return "none"; });
const Need replicas = need([](const Scenario& s) { return s.layout.dp_replicate >= 2; }, "dp_replicate >= 2",
                           [](const Scenario& s) { return num(s.layout.dp_replicate); });
const Need zero2 = need([](const Scenario& s) { return s.layout.dp_sharding == DpSharding::zero2; },
                        "layout.dp_sharding zero2", [](const Scenario& s) {
                          return std::string(dp_sharding_name(s.layout.dp_sharding));
                        });
const Need tied = need([](const Scenario& s) { return s.model.tie_embeddings; }, "tied embeddings",
                       [](auto&) { return "untied"; });
const Need fp16 = need([](const Scenario& s) { return s.model.store == Low::fp16; },
                       "the fp16 policy (its loss scaler)",
                       [](const Scenario& s) { return precision_name(s.model.precision()); });
const Need fp8 = need([](const Scenario& s) { return s.model.fp8 && !s.model.fp8_delayed; },
                      "the fp8 policy with current scaling (its amax reductions where a row or weight is split)",
                      [](const Scenario& s) { return precision_name(s.model.precision()); });
const Need fp8_any = need([](const Scenario& s) { return s.model.fp8; }, "an fp8 policy (fp8 or fp8-delayed)",
                          [](const Scenario& s) { return precision_name(s.model.precision()); });
const Need steps2 = need([](const Scenario& s) { return s.steps >= 2; }, "steps >= 2 (a step after an update)",
                         [](const Scenario& s) { return num(s.steps); });
const Need fp8_delayed = need([](const Scenario& s) { return s.model.fp8 && s.model.fp8_delayed; },
                              "the fp8-delayed policy (its amax histories)",
                              [](const Scenario& s) { return precision_name(s.model.precision()); });
const Need store16 = need([](const Scenario& s) { return s.model.store != Low::none; },
                          "a 16-bit compute copy (bf16, fp16 or an fp8 policy)",
                          [](const Scenario& s) { return precision_name(s.model.precision()); });
const Need fp32_reduce = need([](const Scenario& s) { return s.model.reduce != Low::bf16; },
                              "reductions kept above bf16", [](auto&) { return "bf16-reduce-bf16"; });
// TP sums some gradient: LayerNorm's under SP, the router's in an MoE layer.
const Need tp_summed = need([](const Scenario& s) { return s.layout.sp || is_moe(s); },
                            "a gradient summed over TP (LayerNorm under SP, or the router)",
                            [](auto&) { return "dense, sp off"; });
// loss_mean_of_rank_means is right when every rank holds B / (M·dp) sequences.
const Need uneven = need(
    [](const Scenario& s) {
      return s.model.batch % (s.model.microbatches * s.layout.dp_replicate * s.layout.dp_shard) != 0;
    },
    "a batch that does not split evenly over micro-batches x dp_replicate x dp_shard",
    [](const Scenario& s) { return "batch " + num(s.model.batch) + " splits evenly"; });
struct Entry {
  std::string_view bug;
  std::vector<Need> needs;
  std::string_view factor = {};  // "" the registry's, with the rule of zoo_factor_in; {tp}, {tp*cp*dpr} replaced
  std::string_view root = {};    // "" the registry's
  bool at_resume = false;        // acts at the resume (phase 2's first step): the shape's save_at
  bool policy = false;           // acts only under some precision policies: its needs decide under --precision
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = {
      // every replica counted: LayerNorm's are the TP lanes' and, as FSDP shards over dp_shard only,
      // the cp ranks' and HSDP's replicas' too
      {"norm_counts_replicas", {tp2}, "layernorm x{tp*cp*dpr}"},
      {"norm_drops_experts", {moe}},
      {"router_grad_averaged", {moe, tp2}},
      {"sp_layernorm_not_summed", {tp2, sp}},
      {"sp_rmsnorm_not_summed", {tp2, sp}},  // the norm family's rule: LayerNorm's weights as well as RMSNorm's
      // a few elements of the norm family, their partial sums: a ratio near 1
      {"qk_norm_not_summed_tp", {tp2, qknorm}, "not a clean factor|not a scaling"},
      // wk, wv's part of the attention family, wrong: no clean factor of the family's row
      {"kv_grad_not_summed_shared", {kv_shared}, "not a clean factor|not a scaling"},
      {"kv_grad_summed_tp_times", {kv_shared}, "not a clean factor|not a scaling"},
      {"expert_grads_times_tp", {moe, tp2}},
      {"dp_averaged_twice", {dp2}, "(= 1/dp)|(= 1/dense_dp)"},  // the dense DP group holds the cp ranks
      {"adam_step_not_restored", {resume, adam_state}, "", "", true},
      {"bias_update_sign", {moe, bias}},
      // a small aux_alpha moves the loss by a ratio near 1
      {"aux_coef_per_microbatch", {moe, aux, mb2}, "not a clean factor|not a scaling"},
      {"norm_not_allreduced", {world2}},
      {"micro_loss_scaling", {mb2}},
      {"loss_mean_of_rank_means", {uneven}},
      {"tokens_per_expert_local", {moe, world2}},
      {"router_grad_summed_replicas", {moe, tp2}},
      {"gather_backward_drops_peers", {moe, tp2, no_sp}},
      {"aux_stats_per_lane", {moe, aux, tp2, sp}},
      {"vocab_ce_max_wrong_group", {tp2}, "not a clean factor|not a scaling"},  // the loss moves by a ratio near 1
      {"alltoallv_counts_off_by_one", {moe, ep2}},
      // acts wherever ep > 1 (parallel_run.cpp sums the EDP result over the EP peers), also where the
      // dense DP group is the expert DP group (ep folded over tp): --check-cannot showed it
      {"expert_grads_over_dense_dp", {moe, ep2}},
      {"strided_saved_as_shard", {resume}, "", "", true},
      {"clip_skips_experts", {moe, clip}},
      {"optim_state_replica_drift", {replicas, adam_state}},
      {"zero2_reduce_incomplete", {zero2, mb2, pp1}},
      {"pp_tied_embedding_not_synced", {pp2, tied}},
      {"pp_embedding_synced_twice", {pp2, tied}},
      {"pp_embedding_synced_after_dp", {pp2, tied, dp2}},
      {"pp_loss_per_microbatch_last_stage", {pp2, mb2}},
      {"pp_grads_wiped_per_microbatch", {pp2, mb2}},
      {"ckpt_v_from_m_buffer", {resume, adam_state}, "", "", true},
      {"aux_stats_per_cp_chunk", {moe, aux, cp2}, "not a clean factor|not a scaling"},
      {"combine_weights_twice_ep", {moe, ep2}},
      // the dropped part of dK, dV: a wrong computation, whose ratio may come out near 1
      {"cp_kv_grad_local", {cp2}, "not a clean factor|not a scaling"},
      {"rope_local_positions_cp", {cp2, rope}, "not a clean factor|not a scaling|no scale ratio"},
      {"rope_contiguous_positions_balanced_cp", {cp_balanced, rope},
       "not a clean factor|not a scaling|no scale ratio"},
      {"qk_norm_after_rope", {qknorm, rope}, "not a clean factor|not a scaling"},
      // the first TP-summed gradient: LayerNorm's under SP, else the router's
      {"tp_reduce_in_bf16", {tp2, tp_summed, fp32_reduce}, "", "grad layernorm|grad router"},
      {"dp_reduce_in_bf16", {dp2, fp32_reduce}},
      {"no_fp32_master", {}},
      {"outer_compute_copy_unrounded", {store16}, "", "", false, true},
      {"grad_accum_in_bf16", {pp1}},
      {"cross_entropy_in_bf16", {}},
      {"optim_state_in_bf16", {adam_state}},
      {"fp16_found_inf_local", {fp16, dp2}, "", "", false, true},
      {"fp16_scale_not_restored", {fp16, resume}, "", "", false, true},
      {"fp16_clip_before_unscale", {fp16}, "", "", false, true},
      {"fp16_unscale_per_microbatch", {fp16, mb2, pp1}, "", "", false, true},
      {"fp8_amax_per_lane", {fp8, tp2}, "", "", false, true},  // the registry's: the compute_copy row (issue 41)
      {"fp8_delayed_amax_local", {fp8_delayed, tp2}, "", "", false, true},
      {"fp8_history_per_microbatch", {fp8_delayed, mb2}, "", "", false, true},
      {"fp8_history_not_restored", {fp8_delayed, resume}, "", "", true, true},
      {"fp8_weight_cache_not_refreshed", {fp8_any, steps2}, "", "", false, true},
      {"fp8_partial_sum_quantized", {fp8_any, tp2}, "", "", false, true},
  };
  return all;
}

const Entry& entry(const Injection& bug) {
  for (const Entry& e : entries())
    if (e.bug == bug.name) return e;
  throw ConfigError("--set", "bug '" + std::string(bug.name) +
                                 "' has no entry in cli/zoo_shape.cpp: say what it needs of a shape there");
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// One alternative of the registry's factor: the "(= name)" part where it names a degree.
std::string degree_part(const std::string& f) {
  const size_t open = f.find("(=");
  if (open == std::string::npos) return f;
  const size_t close = f.find(')', open);
  return f.substr(open, close == std::string::npos ? std::string::npos : close + 1 - open);
}

}  // namespace

std::string zoo_cannot_act(const Injection& bug, const Scenario& s) {
  std::string why;
  for (const Need& n : entry(bug).needs)
    if (std::string r = n(s); !r.empty()) why += (why.empty() ? "" : "; ") + r;
  return why;
}

std::string zoo_factor_in(const Injection& bug, const Scenario& s) {
  std::string f(entry(bug).factor);
  if (f.empty()) {
    const std::string reg(bug.factor);
    for (size_t at = 0;;) {
      const size_t bar = reg.find('|', at);
      f += (at == 0 ? "" : "|") + degree_part(reg.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
      if (bar == std::string::npos) break;
      at = bar + 1;
    }
  }
  replace_all(f, "{tp}", num(s.layout.tp));
  replace_all(f, "{tp*cp*dpr}", num(s.layout.tp * s.layout.cp * s.layout.dp_replicate));
  return f;
}

int64_t zoo_step_in(const Injection& bug, const Scenario& s) {
  return entry(bug).at_resume && s.resume ? s.resume->save_at : bug.step;
}

std::string zoo_root_in(const Injection& bug, const Scenario& s) {
  const std::string_view r = entry(bug).root;
  std::string root(r.empty() ? bug.root : r);
  // tied embeddings: no head family; the embedding is the head (the verdict's root ranks it first)
  if (s.model.tie_embeddings) {
    replace_all(root, "grad head", "grad embedding");
    replace_all(root, "param head", "param embedding");
  }
  // QK-norm: its weights (the norm family) take dQ and dK before wq and wk do
  if (s.model.qk_norm) replace_all(root, "grad attention", "grad attention|grad layernorm");
  return root;
}

bool zoo_policy_bound(const Injection& bug) {
  return entry(bug).policy;
}

bool zoo_shape_known(std::string_view bug) {
  return std::any_of(entries().begin(), entries().end(), [&](const Entry& e) { return e.bug == bug; });
}

}  // namespace parity::cli
