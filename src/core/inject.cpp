#include "core/inject.h"

#include <cstdlib>
#include <optional>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/knobs.h"

namespace parity {

const std::vector<Injection>& injections() {
  static const std::vector<Injection> all = {
      {"norm_counts_replicas", "parallel/reduction_plan.cpp (a plan mutation), grad norm",
       "every replica of a replicated gradient enters the global norm (TP replicas counted tp times: the grad-norm "
       "clipping class that double-counts replicas)",
       "tp2.json", "grad_norm", 0, "layernorm x2, router x2"},
      {"norm_drops_experts", "parallel/reduction_plan.cpp (a plan mutation), grad norm",
       "the routed experts' gradients left out of the global norm (expert parameters on a process group of their "
       "own, forgotten by the clip)",
       "fsdp2_tp2_ep2.json", "grad_norm", 0, "routed_experts x0"},
      {"router_grad_averaged", "parallel/reduction_plan.cpp (a plan mutation), TP reduction of the router",
       "the router gate's gradient averaged over the TP lanes where each lane holds a part of the sum (averaged "
       "where it should be summed)",
       "tp2.json", "grad router", 0, "1/2 (= 1/tp)"},
      {"sp_layernorm_not_summed", "parallel/reduction_plan.cpp (a plan mutation), TP reduction under SP",
       "LayerNorm gradients not summed over the TP group under sequence parallel: each lane keeps its own "
       "sequence chunk's part",
       "tp2_sp.json", "grad layernorm", 0, "not a clean factor"},
      {"sp_rmsnorm_not_summed", "parallel/reduction_plan.cpp (a plan mutation), TP reduction under SP",
       "RMSNorm weight gradients not summed over the TP group under sequence parallel (issue 47: the norm "
       "Llama / Qwen models use; replicated weights whose gradient is a partial sum per lane)",
       "tp2_sp_rmsnorm.json", "grad layernorm", 0, "not a clean factor"},
      {"qk_norm_not_summed_tp", "parallel/param_plan.cpp (a plan mutation), TP reduction of the QK-norm weights",
       "the QK-norm weights' gradients not summed over the TP group: every lane normalises only its own heads, "
       "so each keeps its heads' part (issue 47: replicated like a norm weight, partial like the router)",
       "tp2_qknorm.json", "grad layernorm", 0, "not a clean factor"},
      {"kv_grad_not_summed_shared", "parallel/param_plan.cpp (a plan mutation), TP reduction of shared KV heads",
       "grouped-query attention with fewer KV heads than TP lanes: each KV head (wk, wv columns) is replicated "
       "over the lanes whose query heads share it, and its gradient is left unsummed over them: each lane keeps "
       "its own query heads' part (issue 47)",
       "tp4_gqa2.json", "grad attention", 0, "not a clean factor"},
      {"kv_grad_summed_tp_times", "parallel/param_plan.cpp (a plan mutation), TP reduction of shared KV heads",
       "grouped-query attention with fewer KV heads than TP lanes: the shared KV heads' gradient, once summed "
       "over the sharing lanes, is all-reduced over tp again: every wk, wv gradient x tp (issue 47)",
       "tp4_gqa2.json", "grad attention", 0, "not a clean factor"},
      {"expert_grads_times_tp", "parallel/reduction_plan.cpp (a plan mutation), expert gradient reduction",
       "the routed experts' gradients come out tp times too large; Adam all but hides it, SGD and the gradient "
       "check do not",
       "fsdp2_tp2_sgd.json", "grad routed_experts", 0, "2 (= tp)"},
      {"dp_averaged_twice", "parallel/reduction_plan.cpp (a plan mutation), data-parallel reduction",
       "the dense gradients divided by the data-parallel size twice (a mean reduce-scatter, then a second division)",
       "fsdp4.json", "grad head", 0, "1/4 (= 1/dp)"},
      {"adam_step_not_restored", "ckpt/training_state.cpp, resume",
       "a resumed run restarts the optimizer's step count, so Adam's bias correction starts over",
       "resume_fsdp3_to_fsdp4.json", "param head", 3, "not a clean factor"},
      {"bias_update_sign", "parallel/parallel_run.cpp, expert-bias update",
       "the aux-loss-free expert-bias update applied with its sign flipped: overloaded experts gain bias",
       "fsdp2_tp2_sp_bias.json", "expert_bias all MoE layers", 0, "-1: sign flipped"},
      {"aux_coef_per_microbatch", "parallel/pmoe.cpp, aux loss",
       "the aux-loss coefficient divided by the micro-batch size instead of the batch size: under gradient "
       "accumulation the balance loss is microbatches times too strong",
       "fsdp2_tp2_mb2_aux.json", "loss all micro-batches", 0, "not a clean factor"},
      {"norm_not_allreduced", "parallel/reduction_plan.cpp (a plan mutation), grad norm",
       "the clipping norm taken from this rank's gradients only, never reduced over the world, so every rank "
       "clips by a different, too small norm",
       "fsdp2_tp2_clip.json", "grad_norm", 0, "every family matches"},
      {"micro_loss_scaling", "parallel/pmodel.cpp, loss scaling",
       "each micro-batch's loss averaged over its own tokens instead of the whole batch's, so under gradient "
       "accumulation loss and gradients come out microbatches times too large",
       "fsdp2_tp2_mb2.json", "loss all micro-batches", 0, "2 (= microbatches)"},
      {"loss_mean_of_rank_means", "parallel/pmodel.cpp, loss scaling",
       "each data-parallel rank takes the mean of its own tokens' loss and the ranks' means are averaged (DDP's "
       "gradient mean over per-rank loss means): right when every rank holds as many tokens, wrong when "
       "batches are uneven",
       "fsdp4_uneven_b9_mb2.json", "loss all micro-batches", 0, "not a clean factor"},
      {"tokens_per_expert_local", "parallel/parallel_run.cpp, step bookkeeping",
       "tokens_per_expert counted per rank and never all-reduced: the load-balancing statistics and the "
       "expert-bias update see one rank's tokens",
       "fsdp4_ep4.json", "tokens_per_expert all MoE layers", 0, ""},
      {"router_grad_summed_replicas", "parallel/reduction_plan.cpp (a plan mutation), TP reduction of the router",
       "the router gate's gradient, already complete on every lane after the TP sum, summed over the TP lanes "
       "once more (a hook for TP-replicated parameters summing where the replicas hold the same value)",
       "tp2.json", "grad router", 0, "2 (= tp)"},
      {"gather_backward_drops_peers", "parallel/pmoe.cpp, backward of the routed tokens' gather",
       "under TP without SP each lane routes its own share of the replicated tokens and the outputs are "
       "all-gathered; the backward keeps this lane's rows of the input gradient and drops the peers' rows",
       "tp2.json", "grad layernorm", 0, "not a scaling"},
      {"aux_stats_per_lane", "parallel/pmoe.cpp, aux loss under SP",
       "under sequence parallel the load-balancing statistics (token fractions, mean scores) taken over each "
       "lane's own sequence chunk instead of the whole sequences",
       "fsdp2_tp2_sp_aux.json", "loss all micro-batches|grad router", 0, "not a scaling|not a clean factor"},
      {"vocab_ce_max_wrong_group", "parallel/tp_ops.cpp, vocab-parallel cross-entropy",
       "the row max of the vocab-parallel cross-entropy reduced over the wrong group (here: none), so each lane "
       "shifts its sum of exponentials by its own max and the lanes' sums are added unscaled",
       "tp2.json", "loss all micro-batches", 0, "not a clean factor"},
      {"alltoallv_counts_off_by_one", "parallel/ep_dispatch.cpp, EP dispatch plan",
       "the alltoallv split between two EP peers off by one: one token's row goes to the next peer's first "
       "expert (sender and receiver agree, so nothing hangs or crashes)",
       "fsdp4_ep2.json", "loss all micro-batches|grad head|grad routed_experts", 0, "not a"},
      {"expert_grads_over_dense_dp", "parallel/reduction_plan.cpp (a plan mutation), expert gradient reduction",
       "the routed experts' gradients reduced over the dense data-parallel group instead of the expert "
       "data-parallel group: with EP borrowed from DP the EP peers in it hold other experts, whose gradients "
       "are added in",
       "fsdp4_ep2.json", "grad routed_experts", 0, "not a clean factor"},
      {"strided_saved_as_shard", "ckpt/save.cpp, chunk geometry",
       "a StridedShard tensor's saved chunks get the offsets a plain Shard would have: a round trip into the "
       "same layout reads them back unharmed, another layout loads rows from the wrong places (uneven "
       "pieces leave gaps the loader refuses: resume_fsdp3_tp2_to_fsdp2_tp2)",
       "resume_fsdp4_tp2_to_hsdp2x2_tp2_ep2_etp2.json", "loss all micro-batches", 3,
       "not a clean factor"},
      {"clip_skips_experts", "parallel/reduction_plan.cpp (a plan mutation), gradient clipping",
       "the clip coefficient, computed from the right global norm, applied to every gradient but the routed "
       "experts' (expert parameters kept out of the clipping pass): grad_norm and clip_coef match, only the "
       "parameters after a clipped step differ",
       "fsdp2_tp2_clip.json", "param routed_experts", 0, "1/clip_coef"},
      {"optim_state_replica_drift", "parallel/parallel_run.cpp, optimizer step",
       "one data-parallel replica's Adam second moment one ulp apart from the others' (a replica updated apart, "
       "as from a reduction whose bits differ from rank to rank): its parameters are still equal after the step",
       "hsdp2x2.json", "replicas every tensor", 0, ""},
      {"zero2_reduce_incomplete", "parallel/parallel_run.cpp, micro-batch accumulation under zero2",
       "under layout.dp_sharding zero2 the gradient reduce-scatter taken before the last micro-batch's gradient "
       "is accumulated (DeepSpeed's ZeRO-2 reduction of a gradient not yet complete, ds_grad_is_ready): the "
       "reduced shards miss that micro-batch, the loss is right",
       "zero2_dp4_tp2_ep2.json", "grad head", 0, "not a clean factor"},
      {"pp_tied_embedding_not_synced", "parallel/parallel_run.cpp, tied embeddings under pipeline parallel",
       "with tie_embeddings across pipeline stages the embedding group's all-reduce left out: the first stage "
       "keeps only the embedding's gradient, the last only the head's (uw-syfi/piper#13's class), and the two "
       "replicas drift apart",
       "pp2_1f1b_tp2_ep2_tied.json", "grad embedding", 0, ""},
      {"pp_embedding_synced_twice", "parallel/parallel_run.cpp, tied embeddings under pipeline parallel",
       "the embedding group's all-reduce of the tied embedding's gradient run twice (a pipeline gradient reduced "
       "twice, as PaddlePaddle#30437's repeated all-reduce): every copy holds twice the sum",
       "pp2_1f1b_tp2_ep2_tied.json", "grad embedding", 0, "2"},
      {"pp_embedding_synced_after_dp", "parallel/parallel_run.cpp, tied embeddings under pipeline parallel",
       "the tied embedding's gradient reduced over data parallel before the embedding group's all-reduce, which "
       "then adds the partner stage's partial, not yet reduced, values (Megatron-LM#844, distributed optimizer "
       "with shared embeddings)",
       "pp2_1f1b_fsdp2_tied_aux.json", "grad embedding", 0, ""},
      {"pp_loss_per_microbatch_last_stage", "parallel/pmodel.cpp, the loss under pipeline parallel",
       "the last pipeline stage normalises its cross-entropy by each micro-batch's own token count while the "
       "other stages' load-balancing terms keep the global count (a loss normalised per micro-batch on only "
       "some stages)",
       "pp2_1f1b_fsdp2_tied_aux.json", "loss all micro-batches", 0, ""},
      {"pp_grads_wiped_per_microbatch", "parallel/parallel_run.cpp, the pipeline schedule",
       "the last pipeline stage's gradient accumulators reset at every micro-batch's forward (a stage "
       "re-initialised between micro-batches, NeMo Automodel#3530): only the last micro-batch trains it, the "
       "loss is right",
       "pp2_1f1b.json", "grad head", 0, ""},
      {"ckpt_v_from_m_buffer", "ckpt/training_state.cpp, the optimizer state's checkpoint entries",
       "Adam's second-moment entries point at the first moment's tensors: a save writes m where v belongs and a "
       "load reads it back into m, so save(load(A)) is bitwise A while the resumed optimizer never gets its v",
       "resume_fsdp3_to_fsdp4.json", "param head", 3, ""},
      {"aux_stats_per_cp_chunk", "parallel/pmoe.cpp, aux loss under context parallel",
       "under context parallel the load-balancing statistics (token fractions, mean scores) taken over each "
       "cp rank's own sequence chunk instead of the whole sequence gathered over cp, and each rank's loss added",
       "cp2.json", "loss all micro-batches", 0, "not a clean factor"},
      {"combine_weights_twice_ep", "parallel/pmoe.cpp, the MoE combine under EP",
       "on one EP rank the combine weights each expert's output by its routing weight squared (the weights "
       "applied twice, as a route_scale applied again after the dispatch would), in the forward only (issue 45: "
       "a forward bug named at its op, layer L combine). Under bf16 and fp32 the loss moves within its bound "
       "and the rows read the gradients' change as bf16 rounding (a misreading of the verdict's, docs/zoo.md); "
       "the trace names layer 1 combine, forward, under every policy",
       "fsdp4_ep2.json", "loss all micro-batches|grad head", 0, "not a|rounded to bf16"},
      {"cp_kv_grad_local", "parallel/cp_ops.cpp, attention backward across cp",
       "under context parallel each rank keeps its own queries' part of its keys' and values' gradient and drops "
       "the part the later chunks' queries computed (the reduce-scatter of dK, dV left out)",
       "cp2_dense.json", "grad attention", 0, "not a clean factor"},
      {"rope_local_positions_cp", "parallel/pmodel.cpp, rotary positions under context parallel",
       "under context parallel each rank rotates its chunk's q and k with local positions 0 .. S/cp - 1 instead "
       "of the chunk's global positions (issue 47: the rope offset of a sequence split over ranks forgotten)",
       // fp16 (issue 48): the loss fails by 8.5x its bound, under kTwinFactor, and the strongest row is grad
       // embedding at 338x, grad attention's 337x beside it. fp8 (issue 48e): the loss moves 4.8e-5 at step 0,
       // under its floor (bf16: 6.13e-5, just over it), so the first failing row in the data flow is the first
       // gradient of the backward, grad head (121x)
       "cp2_rope.json", "loss all micro-batches|grad head|grad attention|routing layers.1|grad embedding", 0,
       "not a clean factor|not a scaling|no scale ratio"},
      {"rope_contiguous_positions_balanced_cp", "parallel/pmodel.cpp, rotary positions under context parallel",
       "under the load-balanced cp order (rank r holds chunks r and 2cp-1-r of 2cp) each rank rotates its rows "
       "with the contiguous order's positions r*S/cp + i: rope positions off by a chunk (issue 47)",
       // fp8 (issue 48e): as rope_local_positions_cp, the loss under its floor at step 0, grad head first (93x)
       "cp2_balanced_rope.json", "loss all micro-batches|grad head|grad attention|routing layers.1", 0,
       "not a clean factor|not a scaling|no scale ratio"},
      {"qk_norm_after_rope", "parallel/pmodel.cpp, the order of QK-norm and rotary positions",
       "the rotary embedding applied to q and k before the per-head RMSNorm instead of after it (issue 47: "
       "Qwen3 normalises, then rotates; the norm's weights do not commute with the rotation)",
       "tp2_qknorm_rope.json", "grad layernorm", 0, "not a clean factor|not a scaling"},
      // Precision faults (issue 24): each rounds to bf16 where the scenario's policy keeps fp32.
      {"tp_reduce_in_bf16",
       "parallel/reduction_plan.cpp (a plan mutation), TP reduction of TP-replicated parameters",
       "the TP all-reduce of the LayerNorm (under SP) and router gradients run in bf16 where the policy reduces "
       "in fp32 (pytorch#190626: FSDP2's reduce_dtype not applied to the TP Partial -> Replicate reduction)",
       "bf16_tp2_sp.json", "grad layernorm", 0, "rounded to bf16"},
      {"dp_reduce_in_bf16", "parallel/reduction_plan.cpp (a plan mutation), data-parallel reduction",
       "the data-parallel reduce-scatter of the gradients in bf16 under an fp32 reduce policy",
       "bf16_fsdp4.json", "grad head", 0, "rounded to bf16"},
      {"no_fp32_master", "parallel/parallel_run.cpp, optimizer step",
       "the update applied to bf16 parameters with no fp32 master copy: every step's parameters are rounded "
       "to bf16 (accelerate#3979: the FSDP mixed-precision upcast silently a no-op)",
       "bf16_fsdp4.json", "param head", 0, "rounded to bf16"},
      {"outer_compute_copy_unrounded", "parallel/param_plan.cpp (a plan mutation), the compute copy's format",
       "the embedding, the final norm and the head computed from their fp32 masters where the policy computes "
       "every layer from a bf16 copy (FSDP2: the root's fully_shard given no MixedPrecisionPolicy, the blocks' "
       "their own: the parameters the root holds keep their fp32 dtype); the compute_copy row (issue 41) sees "
       "the copies differ from one device's bit for bit, in every 16-bit policy alike",
       "bf16_fsdp4.json", "compute_copy every gathered copy", 0, "fp32 where"},
      {"grad_accum_in_bf16", "parallel/parallel_run.cpp, micro-batch gradient accumulation",
       "gradients accumulated over micro-batches in bf16 instead of an fp32 main grad",
       "bf16_fsdp2_tp2_mb2.json", "grad head", 0, "rounded to bf16"},
      {"cross_entropy_in_bf16", "parallel/pmodel.cpp, cross-entropy backward",
       "the softmax of the cross-entropy and its gradient taken in bf16 where the policy keeps fp32",
       "bf16_fsdp4.json", "grad head", 0, "rounded to bf16"},
      {"optim_state_in_bf16", "parallel/parallel_run.cpp, optimizer state",
       "Adam's first and second moments kept in bf16 instead of fp32",
       "bf16_fsdp4.json", "param head", 0, "rounded to bf16"},
      // fp16's dynamic loss scaling (issue 48, optim/loss_scaler.h)
      {"fp16_found_inf_local", "parallel/parallel_run.cpp, fp16 found-inf flag",
       "the overflow check on this rank's own gradients (its micro-batches, before the data-parallel "
       "reduction), never all-reduced: ranks skip different steps, and one that did not skip applies an inf",
       "fp16_fsdp4_uneven_b3_overflow.json", "loss_scale and skipped steps", 0, ""},
      {"fp16_scale_not_restored", "ckpt/training_state.cpp, resume",
       "the loss scaler's state restored on the first rank only: the others resume at the initial scale, "
       "so the ranks' scales differ after a resume",
       "resume_fp16_fsdp3_to_fsdp4.json", "loss_scale and skipped steps", 4, ""},
      {"fp16_clip_before_unscale", "parallel/parallel_run.cpp, fp16 grad norm",
       "the grad norm and the clipping taken from the gradients still multiplied by the loss scale "
       "(clip_grad_norm_ before scaler.unscale_): the norm is scale times too large, every step clips",
       "fp16_fsdp4_overflow.json", "grad_norm", 0, ""},
      {"fp16_unscale_per_microbatch", "parallel/parallel_run.cpp, fp16 micro-batch accumulation",
       "the gradients unscaled as each micro-batch is accumulated, and the sum unscaled again: the earlier "
       "micro-batches' parts are divided by the scale twice",
       "fp16_fsdp2_tp2_mb2_overflow.json", "grad head", 2, ""},
      // fp8's amax reductions (issue 48, core/fp8.h)
      {"fp8_amax_per_lane", "parallel/tp_ops.cpp, fp8 amax over TP / ETP",
       "each TP (ETP) lane quantizes its piece with its own amax where the row or the weight is split over the "
       "lanes (wo's and w2's inputs, the projections' output gradients, TP-sharded weights): the lanes use "
       "scales one device never would; the TP-sharded weights' compute copies show it first, bit for bit (the "
       "compute_copy row, issue 41)",
       "fp8_tp2_sp.json", "compute_copy every gathered copy", 0, "quantized otherwise than one device"},
      // fp8's delayed scaling (issue 48, core/fp8_delayed.h)
      {"fp8_delayed_amax_local", "parallel/pmodel.cpp, fp8-delayed amax history at the step's end",
       "each rank pushes the amaxes of its own pieces onto the history, never reduced over the ranks holding "
       "the rest (the TP lanes' columns, the other replicas' tokens): from step 1 the lanes quantize with "
       "scales one device never would",
       "fp8_delayed_tp2_sp_mb2.json", "grad router|grad attention|grad head", 1, "not a clean factor|not a scaling"},
      {"fp8_history_per_microbatch", "parallel/pmodel.cpp, fp8-delayed amax history",
       "the amax history pushed at every micro-batch's forward instead of once per optimizer step: the later "
       "micro-batches of a step quantize with scales from the earlier ones' amaxes",
       "fp8_delayed_tp2_sp_mb2.json", "grad router|grad attention|grad head", 0, "not a clean factor|not a scaling"},
      {"fp8_history_not_restored", "ckpt/training_state.cpp, resume",
       "the amax histories and scales not restored from the checkpoint: the resumed run starts with empty "
       "histories, so its first step quantizes nothing (a fresh slot is recorded, not quantized)",
       "resume_fp8_delayed_tp2_sp_to_fsdp4_ep2.json", "grad head", 4, "not a clean factor|not a scaling"},
      // fp8's weight cache (issue 48, item 4: parallel/pmodel.cpp zero_grads)
      {"fp8_weight_cache_not_refreshed", "parallel/pmodel.cpp, fp8 weight cache at the step's start",
       "each linear's E4M3 copy (quantized once per step at its first use, kept for every micro-batch's forward "
       "and backward: TransformerEngine's cached FP8 weight and transpose) not refreshed after the optimizer "
       "step: from step 1 the layout computes with the previous step's quantized weights",
       "fp8_tp2_sp.json", "compute_copy every gathered copy", 1, ""},
      // fp8 on a partial sum (issue 48, item 4: parallel/pmodel.cpp, row-parallel outputs)
      {"fp8_partial_sum_quantized", "parallel/pmodel.cpp, row-parallel output before the TP reduction",
       "wo's and the dense MLP's w2's output, each TP lane's partial sum, quantized to E4M3 with the lane's own "
       "scale before the reduce-scatter (the TP reduction compressed to fp8): a scale applied to a partial sum "
       "before its reduction, where one device never quantizes a linear's output",
       // the loss moves within its floor (4.9e-05 against 6.1e-05 at step 0): the first failing row in the data
       // flow is the backward's first gradient, grad head (13x), read as bf16 rounding (a misreading, as
       // combine_weights_twice_ep's); the trace names layer 0 attn_out, forward
       "fp8_tp2_sp.json", "grad head", 0, "not a|rounded to bf16"},
  };
  return all;
}

namespace {
std::vector<std::string> split_names(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream in(v);
  for (std::string name; std::getline(in, name, ',');)
    if (!name.empty()) out.push_back(name);
  return out;
}
std::vector<std::string> parse_env() {
  const char* v = knob("PARITY_INJECT");
  return v == nullptr ? std::vector<std::string>{} : split_names(v);
}
// set_injected's names: once set, they are this process's, whatever the environment says
std::optional<std::vector<std::string>>& from_request() {
  static std::optional<std::vector<std::string>> names;
  return names;
}
}  // namespace

const Injection& find_injection(std::string_view name) {
  for (const auto& i : injections())
    if (i.name == name) return i;
  std::string names;
  for (const auto& i : injections()) names += (names.empty() ? "" : ", ") + std::string(i.name);
  throw ConfigError("--inject", "unknown injection '" + std::string(name) + "' (known: " + names + ")");
}

bool injected(std::string_view name) {
  static const std::vector<std::string> env = parse_env();
  for (const auto& n : from_request() ? *from_request() : env)
    if (n == name) return true;
  return false;
}

std::string injected_names() {
  std::string out;
  for (const auto& n : from_request() ? *from_request() : parse_env()) {
    (void)find_injection(n);
    out += (out.empty() ? "" : ",") + n;
  }
  return out;
}

void set_injected(const std::string& names) {
  std::vector<std::string> list = split_names(names);
  for (const auto& n : list) (void)find_injection(n);
  from_request() = std::move(list);
}

}  // namespace parity
