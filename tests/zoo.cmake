# The bug zoo (core/inject.h, docs/zoo.md): each named bug, turned on in the real parallel
# code path, must fail the scenario that should catch it, and the verdict's root line must
# name it. Label zoo.
set(PARITY_ZOO_SCN ${PROJECT_SOURCE_DIR}/scenarios)
function(parity_zoo name scenario regex)
  add_test(NAME zoo.${name} COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_ZOO_SCN}/${scenario} --inject ${name}; echo exit=$?")
  set_tests_properties(zoo.${name} PROPERTIES LABELS zoo PASS_REGULAR_EXPRESSION "${regex}[^\n]*\n(.*\n)*exit=1\n")
endfunction()
# TP replicas counted tp times: the replicated families' parts of the squared norm are x tp.
parity_zoo(norm_counts_replicas tp2.json
  "root: grad_norm at step 0, scale [0-9.]+ -> squared norm by family, layout / baseline: layernorm x2, router x2 \\(the others match\\)")
# The experts' part of the norm forgotten.
parity_zoo(norm_drops_experts fsdp2_tp2_ep2.json
  "root: grad_norm at step 0, scale [0-9.]+ -> squared norm by family, layout / baseline: routed_experts x0 \\(the others match\\)")
# Router gradients averaged over TP lanes where each lane holds a part of the sum: exactly 1/tp.
parity_zoo(router_grad_averaged tp2.json
  "root: grad router at step 0, scale 0.500000 -> 1/2 \\(= 1/tp\\)[^;]*; also first failing at step 0: grad_norm, param router; [0-9]+ rows fail only from later steps \\(consequences\\)")
# LayerNorm gradients under SP left per lane: the counted copy holds its chunk's part only.
parity_zoo(sp_layernorm_not_summed tp2_sp.json
  "root: grad layernorm at step 0, scale 0.4[0-9]+ -> not a clean factor; also first failing at step 0: grad_norm, param layernorm")
# Expert gradients tp times too large (SGD: the update shows it too).
parity_zoo(expert_grads_times_tp fsdp2_tp2_sgd.json
  "root: grad routed_experts at step 0, scale 2.000000 -> 2 \\(= tp\\)")
# Dense gradients averaged over data parallel twice: every dense family x 1/dp, the head first.
parity_zoo(dp_averaged_twice fsdp4.json
  "root: grad head at step 0, scale 0.250000 -> 1/4 \\(= 1/dp\\)")
# The optimizer's step count lost on resume: the first resumed step's update is wrong.
parity_zoo(adam_step_not_restored resume_fsdp3_to_fsdp4.json
  "root: param head at step 3, scale [0-9.]+ -> not a clean factor; also first failing at step 3: param embedding")
# The expert-bias update with its sign flipped: the bias comes out exactly -1 times the baseline's.
parity_zoo(bias_update_sign fsdp2_tp2_sp_bias.json
  "root: expert_bias all MoE layers at step 0, scale -1.000000 -> -1: sign flipped")
# The aux coefficient over the micro-batch: only a scenario with aux loss and micro-batches > 1
# sees it (none did before fsdp2_tp2_mb2_aux; every other shipped layout passes with it on).
parity_zoo(aux_coef_per_microbatch fsdp2_tp2_mb2_aux.json
  "root: loss all micro-batches at step 0, scale [0-9.]+ -> not a clean factor; also first failing at step 0: grad_norm")
# Counts of one rank: the root is the counts at step 0, everything after is a consequence.
parity_zoo(tokens_per_expert_local fsdp4_ep4.json
  "root: tokens_per_expert all MoE layers at step 0, scale [0-9.]+ -> [^;]*; also first failing at step 0: expert_bias all MoE layers; [0-9]+ rows fail only from later steps \\(consequences\\)")
add_test(NAME zoo.unknown_name_is_bad_input
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_ZOO_SCN}/tp2.json --inject no_such_bug 2>&1; echo exit=$?")
set_tests_properties(zoo.unknown_name_is_bad_input PROPERTIES LABELS zoo PASS_REGULAR_EXPRESSION
  "unknown injection 'no_such_bug' \\(known: norm_counts_replicas, [^\n]*\n.*exit=2\n")
