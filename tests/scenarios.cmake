# Every layout scenario (scenarios/*.json with layout.world > 1) as ctest tests through the
# real command, `parity run` (issue 5): one test in the file's dtype named after the file, one
# in the other dtype (NAME.fp32 for an fp64 file, NAME.fp64 for an fp32 one), and a sample
# under --backend mpi (NAME.mpi).
# Labels: scenario, wN (the world size), the backend, the dtype; `ctest -R fsdp4_tp2` runs
# one scenario, `ctest -L scenario` all of them. Then the checks that the verdict can fail:
# an injected fault must give exit 1 naming the family and its scale ratio, and a layout
# that cannot exist must be refused with exit 2 before any rank starts.
set(PARITY_SCENARIO_DIR ${PROJECT_SOURCE_DIR}/scenarios)
file(GLOB PARITY_SCENARIO_FILES CONFIGURE_DEPENDS ${PARITY_SCENARIO_DIR}/*.json)
# (the uneven-batch layouts are all in it: a rank with no sequence joins every collective of
# a micro-batch with empty buffers, which each backend must take; the deepspeed order's out-of-
# order group members and an etp outside {1, tp} too; and two context-parallel layouts)
set(PARITY_SCENARIO_MPI_SAMPLE fsdp2 tp2_sp fsdp2_tp2 fsdp4_tp2_ep2_etp2 w8_tp2_ep4 tp2_sp_ep2
    fsdp4_uneven_b9_mb2 fsdp2_tp2_sp_uneven_b3_mb2 fsdp4_ep4_uneven_b3_clip w4_tp2_sp_ep4_uneven_b3_mb2
    ds_w8_tp4_ep4 w8_tp4_ep2_etp2 cp2_tp2_sp fsdp2_cp2_ep4)
# A sample of layouts also under fp16 (issue 48: fp16 storage, dynamic loss scaling at GradScaler's
# defaults; `parity matrix --precision fp16` runs them all): data-parallel shards, TP with SP,
# EP, CP, a pipeline, ZeRO-2 and micro-batches.
set(PARITY_SCENARIO_FP16_SAMPLE fsdp4 tp2_sp fsdp2_tp2_ep2 cp2_tp2 pp2_1f1b zero2_dp4_tp2_ep2 fsdp2_tp2_mb2
    w8_tp2_ep4)
# And under fp8 (issue 48: E4M3 / E5M2 linears, the amax over TP / ETP where they split a row or a
# weight; docs/precision.md "fp8"): TP with SP and ETP, FSDP with EP, CP with TP, a pipeline.
set(PARITY_SCENARIO_FP8_SAMPLE tp2_sp fsdp2_tp2_ep2 hsdp2x2_tp2_ep2_etp2 cp2_tp2 pp2_1f1b w8_tp2_ep4)
# And under fp8-delayed (each tensor's scale from its amax history, pushed once per step after a world
# max; docs/precision.md "fp8, delayed scaling"): micro-batches, FSDP with EP and ETP, CP, a pipeline.
set(PARITY_SCENARIO_FP8_DELAYED_SAMPLE fsdp2_tp2_mb2 fsdp4_tp2_ep2_etp2 cp2_tp2 pp2_1f1b w8_tp2_ep4
    resume_fsdp3_tp2_to_fsdp2_tp2)
# Every other layout runs in one of the three (issue 48: "ctest runs each shipped layout in one of them at
# least"), by rotation in file order: fp16, fp8, fp8-delayed (a KV head replicated over tp runs under fp8 since
# the nineteenth round: it took fp16 before); a file whose own dtype is one of them already runs in it (NAME).
# These run on the simulated world (every rank a thread; the same verdict bit for bit, ci/sim_vs_gloo): the
# precision is what they check, and on gloo the 149 runs cost 325 s serial.
set(PARITY_SCENARIO_LOW_ROTATION fp16 fp8 fp8-delayed)
set(PARITY_SCENARIO_LOW_INDEX 0)
set(PARITY_SCENARIO_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)

foreach(file ${PARITY_SCENARIO_FILES})
  get_filename_component(name ${file} NAME_WE)
  file(READ ${file} text)
  string(JSON world ERROR_VARIABLE err GET "${text}" layout world)
  string(JSON backend ERROR_VARIABLE err2 GET "${text}" layout backend)
  if(err OR err2 OR world LESS 2)
    continue()  # world 1 (tiny, small) trains the baseline only: nothing to compare
  endif()
  string(JSON dtype ERROR_VARIABLE err3 GET "${text}" dtype)
  if(err3)
    string(JSON dtype ERROR_VARIABLE err4 GET "${text}" precision)
    if(err4)
      set(dtype fp64)
    endif()
  endif()
  set(other fp32)
  if(dtype STREQUAL "fp32")
    set(other fp64)
  endif()
  add_test(NAME ${name} COMMAND parity run ${file})
  set_tests_properties(${name} PROPERTIES LABELS "scenario;w${world};${backend};${dtype}")
  add_test(NAME ${name}.${other} COMMAND parity run ${file} --precision ${other})
  set_tests_properties(${name}.${other} PROPERTIES LABELS "scenario;w${world};${backend};${other}")
  set(tests ${name} ${name}.${other})
  # Every layout also under the bf16 mixed policy (issue 24): bf16 storage, fp32 compute and
  # reductions, its bounds measured by the rounding twin (docs/precision.md).
  if(NOT dtype MATCHES "^bf16")
    add_test(NAME ${name}.bf16 COMMAND parity run ${file} --precision bf16)
    set_tests_properties(${name}.bf16 PROPERTIES LABELS "scenario;w${world};${backend};bf16")
    list(APPEND tests ${name}.bf16)
  endif()
  # Expert-parallel layouts (issue 6) also with sgd: one step at lr 1 without momentum
  # makes the expert weights' update equal to their gradient, so a gradient scale error
  # (invisible to Adam) shows in the parameters. A resume check cannot run one step (both
  # of its phases need steps: save_at < steps), so it gets only the whole run under sgd.
  string(JSON ep GET "${text}" layout ep)
  string(JSON resume ERROR_VARIABLE no_resume GET "${text}" resume)
  if(ep GREATER 1)
    add_test(NAME ${name}.sgd COMMAND parity run ${file} --optim sgd --lr 0.5 --dtype fp32)
    set_tests_properties(${name}.sgd PROPERTIES LABELS "scenario;w${world};${backend};fp32;sgd")
    list(APPEND tests ${name}.sgd)
    if(no_resume)
      add_test(NAME ${name}.sgd1 COMMAND parity run ${file} --optim sgd --lr 1 --steps 1)
      set_tests_properties(${name}.sgd1 PROPERTIES LABELS "scenario;w${world};${backend};${dtype};sgd")
      list(APPEND tests ${name}.sgd1)
    endif()
  endif()
  set(low "")
  set(low_backend ${backend})
  if(NOT dtype MATCHES "^(fp16|fp8)" AND NOT name IN_LIST PARITY_SCENARIO_FP16_SAMPLE
     AND NOT name IN_LIST PARITY_SCENARIO_FP8_SAMPLE AND NOT name IN_LIST PARITY_SCENARIO_FP8_DELAYED_SAMPLE)
    math(EXPR i "${PARITY_SCENARIO_LOW_INDEX} % 3")
    math(EXPR PARITY_SCENARIO_LOW_INDEX "${PARITY_SCENARIO_LOW_INDEX} + 1")
    list(GET PARITY_SCENARIO_LOW_ROTATION ${i} low)
    set(low_backend sim)
  endif()
  set(low_args)
  if(low_backend STREQUAL "sim")
    set(low_args --backend sim)
  endif()
  if(name IN_LIST PARITY_SCENARIO_FP16_SAMPLE OR low STREQUAL "fp16")
    add_test(NAME ${name}.fp16 COMMAND parity run ${file} --precision fp16 ${low_args})
    set_tests_properties(${name}.fp16 PROPERTIES LABELS "scenario;w${world};${low_backend};fp16")
    list(APPEND tests ${name}.fp16)
  endif()
  if(name IN_LIST PARITY_SCENARIO_FP8_SAMPLE OR low STREQUAL "fp8")
    add_test(NAME ${name}.fp8 COMMAND parity run ${file} --precision fp8 ${low_args})
    set_tests_properties(${name}.fp8 PROPERTIES LABELS "scenario;w${world};${low_backend};fp8")
    list(APPEND tests ${name}.fp8)
  endif()
  if(name IN_LIST PARITY_SCENARIO_FP8_DELAYED_SAMPLE OR low STREQUAL "fp8-delayed")
    add_test(NAME ${name}.fp8-delayed COMMAND parity run ${file} --precision fp8-delayed ${low_args})
    set_tests_properties(${name}.fp8-delayed PROPERTIES LABELS "scenario;w${world};${low_backend};fp8")
    list(APPEND tests ${name}.fp8-delayed)
  endif()
  if(name IN_LIST PARITY_SCENARIO_MPI_SAMPLE)
    add_test(NAME ${name}.mpi COMMAND parity run ${file} --backend mpi)
    set_tests_properties(${name}.mpi PROPERTIES LABELS "scenario;w${world};mpi;fp64")
    list(APPEND tests ${name}.mpi)
  endif()
  set_tests_properties(${tests} PROPERTIES TIMEOUT 180 ENVIRONMENT "${PARITY_SCENARIO_ENV}")
endforeach()

# The verdict can fail: the router's reported gradient doubled -> exit 1, a FAIL row for
# grad/router with scale ratio 2.000; the layernorm parameters off by 1e-3 -> exit 1.
set(PARITY_FAULT_SCENARIO ${PARITY_SCENARIO_DIR}/fsdp2_tp2.json)
add_test(NAME verdict.fault.scale_grad_router
         COMMAND sh -c "PARITY_FAULT=scale_grad:router:2 $<TARGET_FILE:parity> run ${PARITY_FAULT_SCENARIO} --steps 2 2>&1; echo exit=$?")
set_tests_properties(verdict.fault.scale_grad_router PROPERTIES
  PASS_REGULAR_EXPRESSION "\nFAIL +grad +router +[^\n]* 2\\.000000 [^\n]*layers\\.1\\.moe\\.router\\.gate.*verdict: FAIL.*exit=1\n")
add_test(NAME verdict.fault.scale_param_layernorm
         COMMAND sh -c "PARITY_FAULT=scale_param:layernorm:1.001 $<TARGET_FILE:parity> run ${PARITY_FAULT_SCENARIO} --steps 2 2>&1; echo exit=$?")
set_tests_properties(verdict.fault.scale_param_layernorm PROPERTIES
  PASS_REGULAR_EXPRESSION "\nFAIL +param +layernorm +[^\n]*\n.*root: param layernorm at step 0, .*exit=1\n")
# One replica's router parameters moved by 1e-10 relative (on rank 1 alone), far inside every
# normwise bound: the replicas row still fails, naming the group and the two ranks.
add_test(NAME verdict.fault.replica_drift
         COMMAND sh -c "PARITY_FAULT=scale_param:router:1.0000000001@1 $<TARGET_FILE:parity> run ${PARITY_FAULT_SCENARIO} --steps 2 2>&1; echo exit=$?")
set_tests_properties(verdict.fault.replica_drift PROPERTIES
  PASS_REGULAR_EXPRESSION "\nFAIL +replicas +every tensor [^\n]*\n +copies of the same elements differ in their bits: param router on ranks [0-9]+ and 1 .*root: replicas .*exit=1\n")
# A malformed fault is bad input: exit 2 before any rank starts.
add_test(NAME verdict.fault.malformed_is_refused
         COMMAND sh -c "PARITY_FAULT=scale_grad:nonsense:2 $<TARGET_FILE:parity> run ${PARITY_FAULT_SCENARIO} 2>&1; echo exit=$?")
set_tests_properties(verdict.fault.malformed_is_refused PROPERTIES
  PASS_REGULAR_EXPRESSION "PARITY_FAULT: expected scale_grad.*exit=2\n")

# Layouts that cannot exist are refused with exit 2 and the field and rule, before any rank
# starts (no "parity launch" line in the output).
set(PARITY_BAD_LAYOUT ${CMAKE_CURRENT_BINARY_DIR}/bad_layout_tp3.json)
file(READ ${PARITY_SCENARIO_DIR}/tp2.json PARITY_BAD_TEXT)
string(JSON PARITY_BAD_TEXT SET "${PARITY_BAD_TEXT}" layout tp 3)
string(JSON PARITY_BAD_TEXT SET "${PARITY_BAD_TEXT}" layout etp 3)
string(JSON PARITY_BAD_TEXT SET "${PARITY_BAD_TEXT}" layout world 3)
file(WRITE ${PARITY_BAD_LAYOUT} "${PARITY_BAD_TEXT}")
add_test(NAME verdict.refuses_bad_layout
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_BAD_LAYOUT} 2>&1; echo exit=$?")
set_tests_properties(verdict.refuses_bad_layout PROPERTIES
  PASS_REGULAR_EXPRESSION "bad_layout_tp3\\.json: \\$\\.layout\\.tp: must divide model\\.heads \\(4\\)[^\n]*\nexit=2\n"
  FAIL_REGULAR_EXPRESSION "parity launch")
add_test(NAME verdict.refuses_bad_backend_override
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/fsdp2_tp2_sp.json --backend tcp 2>&1; echo exit=$?")
set_tests_properties(verdict.refuses_bad_backend_override PROPERTIES
  PASS_REGULAR_EXPRESSION "--backend: tcp not in [^\n]*gloo[^\n]*\n[^\n]*\nexit=2\n")

# --report FILE: the same verdict as JSON.
add_test(NAME verdict.report_json
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/tp2.json --steps 2 --report ${CMAKE_CURRENT_BINARY_DIR}/tp2_report.json >/dev/null && cat ${CMAKE_CURRENT_BINARY_DIR}/tp2_report.json")
set_tests_properties(verdict.report_json PROPERTIES
  PASS_REGULAR_EXPRESSION "\"passed\": true.*\"quantity\": \"grad\".*\"subject\": \"router\"")

set_tests_properties(verdict.fault.scale_grad_router verdict.fault.scale_param_layernorm
  verdict.fault.malformed_is_refused verdict.refuses_bad_layout verdict.refuses_bad_backend_override
  verdict.report_json PROPERTIES LABELS "verdict;multiprocess" TIMEOUT 120)

# Issue 41, the step-local verdict (docs/verdict.md "Step-local and trajectory"): fsdp2 with
# data_seed 97196 in bf16. Free-running (--trajectory), Adam (eps 1e-8) compounds one-ulp
# differences: with the twin's storage jitter at 4 ulps grad attention was 1.9x over its floor at
# step 3 (the root said "at rounding level"); at 8 (core/precision.h kJitterUlps) the twin sees
# that growth and the trajectory passes too (PARITY_TWIN_JITTER=4 fails it again). The default
# continues every step from the baseline's state, and passes. A "verdict" key a file may give is
# checked (exit 2).
set(PARITY_SEED97196 ${CMAKE_CURRENT_BINARY_DIR}/fsdp2_seed97196.json)
file(READ ${PARITY_SCENARIO_DIR}/fsdp2.json PARITY_SEED_TEXT)
string(JSON PARITY_SEED_TEXT SET "${PARITY_SEED_TEXT}" data_seed 97196)
string(JSON PARITY_SEED_TEXT SET "${PARITY_SEED_TEXT}" name "\"fsdp2_seed97196\"")
file(WRITE ${PARITY_SEED97196} "${PARITY_SEED_TEXT}")
string(JSON PARITY_BAD_MODE_TEXT SET "${PARITY_SEED_TEXT}" verdict "\"sideways\"")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/bad_verdict_mode.json "${PARITY_BAD_MODE_TEXT}")
string(JSON PARITY_TRAJ_TEXT SET "${PARITY_SEED_TEXT}" verdict "\"trajectory\"")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/fsdp2_seed97196_trajectory.json "${PARITY_TRAJ_TEXT}")
add_test(NAME verdict.step_local.seed97196_bf16_passes
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_SEED97196} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.step_local.seed97196_bf16_passes PROPERTIES
  PASS_REGULAR_EXPRESSION "world 2[^\n]*, step-local, 10 steps, adam[^\n]*\n.*verdict: PASS[^\n]*\n.*exit=0\n")
add_test(NAME verdict.trajectory.seed97196_bf16_passes
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_SEED97196} --precision bf16 --trajectory 2>&1; echo exit=$?")
add_test(NAME verdict.trajectory.from_the_file
         COMMAND sh -c "$<TARGET_FILE:parity> run ${CMAKE_CURRENT_BINARY_DIR}/fsdp2_seed97196_trajectory.json --precision bf16 2>&1; echo exit=$?")
foreach(t verdict.trajectory.seed97196_bf16_passes verdict.trajectory.from_the_file)
  set_tests_properties(${t} PROPERTIES PASS_REGULAR_EXPRESSION
    "world 2[^\n]*, trajectory, 10 steps[^\n]*\n.*\nok +grad +attention [^\n]*\n.*verdict: PASS[^\n]*\n.*exit=0\n")
endforeach()
add_test(NAME verdict.mode_bad_value_is_refused
         COMMAND sh -c "$<TARGET_FILE:parity> run ${CMAKE_CURRENT_BINARY_DIR}/bad_verdict_mode.json 2>&1; echo exit=$?")
set_tests_properties(verdict.mode_bad_value_is_refused PROPERTIES
  PASS_REGULAR_EXPRESSION "\\$\\.verdict[^\n]*step-local[^\n]*\nexit=2\n" FAIL_REGULAR_EXPRESSION "parity launch")
# bf16-reduce-bf16 (docs/precision.md): its twins round partial sums as data-parallel ranks do.
# Before, their one rounding missed it and fsdp2 failed 16 of 23 rows at step 0.
foreach(name fsdp2 hsdp2x2 fsdp2_tp2_mb2 zero2_dp4_ep2)
  add_test(NAME verdict.bf16_reduce_bf16.${name}
           COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/${name}.json --precision bf16-reduce-bf16 2>&1; echo exit=$?")
  set_tests_properties(verdict.bf16_reduce_bf16.${name} PROPERTIES
    PASS_REGULAR_EXPRESSION "bf16-reduce-bf16, [^\n]*step-local[^\n]*\n.*verdict: PASS[^\n]*\n.*exit=0\n")
  set_property(TEST verdict.bf16_reduce_bf16.${name} APPEND PROPERTY LABELS "verdict;multiprocess")
endforeach()
set_tests_properties(verdict.step_local.seed97196_bf16_passes verdict.trajectory.seed97196_bf16_passes
  verdict.trajectory.from_the_file verdict.mode_bad_value_is_refused PROPERTIES LABELS "verdict;multiprocess" TIMEOUT 120)

# --lr reaches the ranks exactly: 1e-9 once became "0.000000" (std::to_string), which every
# rank refused (exit 2); the ranks print the optimizer they ran in the verdict's first line.
add_test(NAME run.lr_override_reaches_ranks_exactly
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PROJECT_SOURCE_DIR}/scenarios/fsdp2.json --steps 1 --lr 1.25e-9 2>&1; echo exit=$?")
set_tests_properties(run.lr_override_reaches_ranks_exactly PROPERTIES PASS_REGULAR_EXPRESSION "1 steps, adam lr 1.25e-09\n.*exit=0\n")

# The one run protocol (harness/runner/run_request.h): the ranks run the request, a JSON file
# holding the resolved scenario with every override (here steps, optimizer, learning rate,
# precision), kept as LOGDIR/request.json with --log-dir and replayable by hand as
# `parity launch -n W -- parity rank FILE`; the replay prints the same verdict line. Nothing is
# left in TMPDIR by a run without --log-dir.
add_test(NAME run.resolved_scenario_replays
         COMMAND sh -c "t=$(mktemp -d) && d=$t/logs && P=$<TARGET_FILE:parity> && TMPDIR=$t $P run ${PROJECT_SOURCE_DIR}/scenarios/tp2.json --steps 2 --optim sgd --lr 3e-7 --precision fp32 --log-dir $d | grep '^verdict:' > $t/a && grep -c '\"lr\": 3e-07' $d/request.json && grep -c '\"dtype\": \"fp32\"' $d/request.json && TMPDIR=$t $P launch -n 2 -- $P rank $d/request.json | sed 's/^.0. //' | grep '^verdict:' > $t/b && cmp $t/a $t/b && cat $t/a && TMPDIR=$t $P run ${PROJECT_SOURCE_DIR}/scenarios/tp2.json --steps 1 >/dev/null && ls $t | tr '\\n' ' ' && echo; echo exit=$?; rm -rf $t")
set_tests_properties(run.resolved_scenario_replays PROPERTIES
  PASS_REGULAR_EXPRESSION "^1\n1\nverdict: PASS[^\n]*\na b logs \nexit=0\n" LABELS "verdict;multiprocess" TIMEOUT 120)

# Everything a rank needs is in its request (run_request.h): a run with a named bug and a fault,
# kept with --log-dir, replays by hand without the environment (env -u), and the replay prints
# the same failing verdict, root and injection line as the run itself.
add_test(NAME run.injected_run_replays
         COMMAND sh -c "t=$(mktemp -d) && d=$t/logs && P=$<TARGET_FILE:parity> && TMPDIR=$t PARITY_FAULT=scale_param:head:3 $P run ${PROJECT_SOURCE_DIR}/scenarios/tp2.json --steps 1 --inject router_grad_averaged --log-dir $d | grep -E '^(verdict|root|injected)' > $t/a; grep -c '\"inject\": \"router_grad_averaged\"' $d/request.json && grep -c '\"fault\": \"scale_param:head:3\"' $d/request.json && env -u PARITY_INJECT -u PARITY_FAULT TMPDIR=$t $P launch -n 2 -- $P rank $d/request.json | sed 's/^.0. //' | grep -E '^(verdict|root|injected)' > $t/b; cmp $t/a $t/b && cat $t/a; echo exit=$?; rm -rf $t")
set_tests_properties(run.injected_run_replays PROPERTIES
  PASS_REGULAR_EXPRESSION "1\n1\n.*injected [^\n]*scale_param:head:3[^\n]*, inject router_grad_averaged\n.*root: grad router at step 0[^\n]*\nverdict: FAIL[^\n]*\nexit=0\n"
  LABELS "verdict;multiprocess" TIMEOUT 120)

# `parity matrix` (the README's main job): a world-1 file is listed as skipped, never passed;
# an injected doubled router gradient fails the matrix naming the family and the factor;
# a missing path is bad input (exit 2) before anything runs.
set(PARITY_MX ${PROJECT_SOURCE_DIR}/scenarios)
add_test(NAME matrix.passes_and_skips_world1
         COMMAND sh -c "$<TARGET_FILE:parity> matrix ${PARITY_MX}/tiny.json ${PARITY_MX}/tp2_ep2.json; echo exit=$?")
set_tests_properties(matrix.passes_and_skips_world1 PROPERTIES PASS_REGULAR_EXPRESSION
  "tiny +1 +one device +skipped.*tp2_ep2 +2 +tp 2, ep 2 +PASS.*matrix verdict: PASS: 1 passed, 0 failed, 1 skipped[^\n]*\nexit=0\n")
add_test(NAME matrix.fault_fails_naming_family_and_factor
         COMMAND sh -c "d=$(mktemp -d) && PARITY_FAULT=scale_grad:router:2 $<TARGET_FILE:parity> matrix ${PARITY_MX}/tp2_ep2.json -j 1 --out $d; echo exit=$?; rm -rf $d")
set_tests_properties(matrix.fault_fails_naming_family_and_factor PROPERTIES PASS_REGULAR_EXPRESSION
  "replay: PARITY_FAULT=scale_grad:router:2 .*tp2_ep2 +2 +tp 2, ep 2 +FAIL .* root grad router x2 at step 0 \\(2 \\(= tp\\)[^\n]*\n.*matrix verdict: FAIL: 0 passed, 1 failed.*exit=1\n")
add_test(NAME matrix.missing_path_is_bad_input
         COMMAND sh -c "$<TARGET_FILE:parity> matrix ${PARITY_MX}/no_such.json 2>&1; echo exit=$?")
set_tests_properties(matrix.missing_path_is_bad_input PROPERTIES PASS_REGULAR_EXPRESSION
  "no_such.json: no such scenario file or directory.*exit=2\n")

# Pairwise coverage (docs/coverage.md): `parity cover` over the shipped matrix passes (every
# possible option value x folding mode pair is covered), and over one file it fails naming a
# missing pair and proposing scenarios for it. Label coverage.
add_test(NAME coverage.shipped COMMAND sh -c "$<TARGET_FILE:parity> cover ${PARITY_MX}; echo exit=$?")
set_tests_properties(coverage.shipped PROPERTIES LABELS coverage PASS_REGULAR_EXPRESSION
  "coverage: [0-9]+ of [0-9]+ possible pairs covered, 0 missing\noption x option: [0-9]+ of [0-9]+ possible pairs covered, 0 missing\ncover verdict: PASS[^\n]*\nexit=0\n")
add_test(NAME coverage.missing_pair_fails COMMAND sh -c "$<TARGET_FILE:parity> cover ${PARITY_MX}/tp2.json; echo exit=$?")
set_tests_properties(coverage.missing_pair_fails PROPERTIES LABELS coverage PASS_REGULAR_EXPRESSION
  "missing: shared=off x tp\n.*proposal: [0-9]+ scenarios cover the [0-9]+ missing pairs.*\ncover verdict: FAIL[^\n]*\nexit=1\n")

# A run request (harness/runner/run_request.h) is read strictly: a bad scenario value or an
# unknown job is exit 2, the message naming the file and the JSON path inside the request.
add_test(NAME rank.bad_request_named
         COMMAND sh -c "t=$(mktemp -d) && echo '{\"job\": \"verdict\", \"scenario\": {\"model\": {\"heads\": 3}}}' > $t/r.json && echo '{\"job\": \"verdikt\"}' > $t/j.json; $<TARGET_FILE:parity> rank $t/r.json 2>&1; echo exit=$?; $<TARGET_FILE:parity> rank $t/j.json 2>&1; echo exit=$?; rm -rf $t")
set_tests_properties(rank.bad_request_named PROPERTIES
  PASS_REGULAR_EXPRESSION "r\\.json: \\$\\.scenario\\.model\\.heads: must divide[^\n]*\nexit=2\n[^\n]*j\\.json: \\$\\.job: expected one of[^\n]*\nexit=2\n")

# Issue 41, a grad row's floor for its model (tolerance.h gradient_row_bound): a case of the
# property generator (dim 2, vocab 2, 2 tokens, tp 2 ep 2, adamw) whose attention, router and
# experts get gradients 1e-4 .. 1e-8 of the model's (all cancellation behind a LayerNorm of two
# elements). One bf16 flip at step 0 moved four families by 0.25%, 1.3x to 10x over their floors
# (ci/calibrate's false alarm, seed 7171). It passes; the same run with the embedding's gradient
# (at the model's scale) x 1.02 still fails there.
set(PARITY_DIM2_CASE ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/bf16_dim2_dead_families.json)
add_test(NAME verdict.bf16_dim2_dead_families_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_DIM2_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_dim2_dead_families_pass PROPERTIES
  PASS_REGULAR_EXPRESSION "ok +grad +router [^\n]* model [^\n]*\n.*verdict: PASS[^\n]*\n.*exit=0\n")
add_test(NAME verdict.bf16_dim2_live_family_fault_fails
         COMMAND sh -c "PARITY_FAULT=scale_grad:embedding:1.02 $<TARGET_FILE:parity> run ${PARITY_DIM2_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_dim2_live_family_fault_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: grad embedding at step 0[^\n]*\n.*exit=1\n")
set_tests_properties(verdict.bf16_dim2_dead_families_pass verdict.bf16_dim2_live_family_fault_fails PROPERTIES
  LABELS "verdict;multiprocess" TIMEOUT 120)
# Issue 41, two false alarms of ci/calibrate (seeds 9898, 9393), kept as cases. The first: Adam
# moves an embedding element whose gradient sits near eps by a few percent of lr on a rounding-level
# gradient difference (param embedding 2.2x its floor at step 0, then at step 1 through the moments
# it left); the param row now allows the update the gradients taken explain (verdict_taken.h
# explained_update), and a parameter scaled by 1.001 still fails there. The second: tp 2, sgd,
# 43 steps, grad shared_experts 1.8x its floor at step 6 with the twin 20x under it; the twin's
# storage jitter (core/precision.h kJitterUlps 4 -> 8) sees the layout's flips, and a gradient
# x 1.02 still fails at step 0 (x 1.002 did until a step of few values got two twins, tolerance.h
# twin_count: the second sees a flip at step 0 that moves shared_experts by 9.1e-4, where the first
# saw none and the floor, 2.4e-4, decided; x 1.01 fails at 1.1x the bound).
set(PARITY_EPS_CASE ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/bf16_adam_eps_embedding.json)
set(PARITY_TP2_CASE ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/bf16_tp2_flips.json)
add_test(NAME verdict.bf16_adam_eps_explained_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_EPS_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_adam_eps_explained_pass PROPERTIES
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
add_test(NAME verdict.bf16_adam_eps_param_fault_fails
         COMMAND sh -c "PARITY_FAULT=scale_param:embedding:1.001 $<TARGET_FILE:parity> run ${PARITY_EPS_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_adam_eps_param_fault_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: param embedding at step 0[^\n]*\n.*exit=1\n")
add_test(NAME verdict.bf16_tp2_flips_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_TP2_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_tp2_flips_pass PROPERTIES PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
add_test(NAME verdict.bf16_tp2_grad_fault_fails
         COMMAND sh -c "PARITY_FAULT=scale_grad:shared_experts:1.02 $<TARGET_FILE:parity> run ${PARITY_TP2_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_tp2_grad_fault_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: grad shared_experts at step 0[^\n]*\n.*exit=1\n")
set_tests_properties(verdict.bf16_adam_eps_explained_pass verdict.bf16_adam_eps_param_fault_fails
  verdict.bf16_tp2_flips_pass verdict.bf16_tp2_grad_fault_fails PROPERTIES LABELS "verdict;multiprocess" TIMEOUT 120)
# Issue 41, the last two false alarms of ci/calibrate (seeds 36036 and 34034), kept as cases: one
# twin had sampled none of the flips a layout showed (a bf16 tp 2 layout with one flip in layer 1's
# MoE input, 20.6% of the shared expert's gradient far against a bound of 13.0%; an fp16 dim-4
# model whose RMSNorm backward amplified one flip, 3.3x its floor at step 1). A step of few values
# under a 16-bit policy gets two twins (tolerance.h twin_count); each case fails with one. A
# gradient x 1.1 still fails in each.
# Issue 41, the three fp16 false alarms of ci/calibrate seed 41043 (drawn2448, drawn1202, drawn444: 60, 48
# and 96 values a step; grad embedding and grad_norm at step 3, grad layernorm 1.8x at step 32, the routed
# experts' gradient 7.3% far against 5% at step 3): both twins missed the flip the layout showed (with
# PARITY_TWIN_STREAM k, k = 0 .. 6, drawn444 passed for k = 1, 2, 6 only). Under fp16 a step of at most 256
# values gets eight twins (tolerance.h kTwinsWhereFlipsAreFewest); each case fails with two. A gradient
# x 1.1 (and x 1.02) still fails in each, its root at the step it had with two twins (measured: the same
# with 0, 2, 4 and 8 twins).
# Issue 41, a false alarm of ci/calibrate (fp8-delayed seed 48512, cal00010_drawn303; bf16 too): dim 2, vocab 2,
# seq 1, dp 2 (ZeRO-2 x ep 2; plain dp 2 the same): its two tokens share one id and their targets differ, so at
# step 1 their loss gradients (p - onehot, +-0.5) cancel to 1.4e-4. The layout computes p by another formula
# (vocab-parallel exp(z - max) / sum), an fp32 ulp off, which the cancellation made 0.9% of the embedding's
# gradient (and of attention's and dense_mlp's); the twin measured 0 (its parameter ulps and storage jitter are
# erased by bf16). The twin now moves that gradient by 2 fp32 ulps (core/precision.h jitter_loss_gradient):
# bound 1.8e-1 (bf16) / 9.3e-2 (fp8-delayed) at step 1; both fail on main (grad embedding 1.2x its 7.8e-3 floor).
# A gradient x 1.1 (and x 1.02) still fails at step 0.
foreach(c "few_values_bf16|bf16_tp2_shared_expert_flip|bf16|shared_experts|0"
          "few_values_fp16|fp16_dim4_rmsnorm_flip|fp16|attention|0"
          "few_values_fp16_dim2_common|fp16_dim2_common_flip|fp16|embedding|3"
          "few_values_fp16_dim4_layernorm|fp16_dim4_layernorm_flip|fp16|layernorm|1"
          "few_values_fp16_tp4_expert_far|fp16_tp4_expert_far_flip|fp16|routed_experts|0"
          "bf16_dim2_loss_gradient_cancels|bf16_dp2_loss_gradient_cancels|bf16|embedding|0"
          "bf16_dim2_loss_gradient_cancels_fp8d|bf16_dp2_loss_gradient_cancels|fp8-delayed|embedding|0")
  string(REPLACE "|" ";" c "${c}")
  list(GET c 0 name)
  list(GET c 1 file)
  list(GET c 2 prec)
  list(GET c 3 family)
  list(GET c 4 step)
  set(path ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/${file}.json)
  add_test(NAME verdict.${name}_pass
           COMMAND sh -c "$<TARGET_FILE:parity> run ${path} --precision ${prec} 2>&1; echo exit=$?")
  set_tests_properties(verdict.${name}_pass PROPERTIES PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
  add_test(NAME verdict.${name}_fault_fails
           COMMAND sh -c "PARITY_FAULT=scale_grad:${family}:1.1 $<TARGET_FILE:parity> run ${path} --precision ${prec} 2>&1; echo exit=$?")
  set_tests_properties(verdict.${name}_fault_fails PROPERTIES
    PASS_REGULAR_EXPRESSION "root: grad ${family} at step ${step}[^\n]*\n.*exit=1\n")
  set_tests_properties(verdict.${name}_pass verdict.${name}_fault_fails PROPERTIES
    LABELS "verdict;multiprocess" TIMEOUT 120)
endforeach()
# Issue 41, the last fp16 false alarm of ci/calibrate (r38, drawn1195): one token, tp 5, sgd with
# momentum. At step 20 the token is predicted almost surely (loss 2^-19): the baseline's p_target - 1
# is its lse's rounding (-2^-19, an ulp of lse 17.67), the vocab-parallel layout's -1.5 x 2^-19, and
# every gradient family moved 43% to 58%, a near-uniform scale. The grad rows get the saturated
# softmax's floor (tolerance.h saturation_floor) and the gradient the optimizer took, a pure scale of
# the baseline's, is held to its normwise bound only (as the grad rows are); it fails with either
# missing. The embedding's gradient x 1.1 still fails at step 0. The same run fails on the old verdict
# in bf16 and fp32 too (the baseline's p_target - 1 rounded to 0 at step 20): both pass with it.
set(PARITY_SAT_CASE ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/fp16_tp5_saturated_softmax.json)
add_test(NAME verdict.fp16_saturated_softmax_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_SAT_CASE} --precision fp16 2>&1; echo exit=$?")
set_tests_properties(verdict.fp16_saturated_softmax_pass PROPERTIES
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
foreach(prec bf16 fp32)
  add_test(NAME verdict.fp16_saturated_softmax_as_${prec}_pass
           COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_SAT_CASE} --precision ${prec} 2>&1; echo exit=$?")
  set_tests_properties(verdict.fp16_saturated_softmax_as_${prec}_pass PROPERTIES
    PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n" LABELS "verdict;multiprocess" TIMEOUT 120)
endforeach()
add_test(NAME verdict.fp16_saturated_softmax_fault_fails
         COMMAND sh -c "PARITY_FAULT=scale_grad:embedding:1.1 $<TARGET_FILE:parity> run ${PARITY_SAT_CASE} --precision fp16 2>&1; echo exit=$?")
set_tests_properties(verdict.fp16_saturated_softmax_fault_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: grad embedding at step 0[^\n]*\n.*exit=1\n")
set_tests_properties(verdict.fp16_saturated_softmax_pass verdict.fp16_saturated_softmax_fault_fails PROPERTIES
  LABELS "verdict;multiprocess" TIMEOUT 120)
# Issue 41, a third false alarm kept as a case (seed 12012): dim 2, vocab 2, two tokens whose
# targets differ, adamw; by step 45 the loss sits at ln 2 and every gradient cancels (the grad norm
# fell 1e4x), and bf16 moved grad layernorm and attention by 1.5% and 2.5%. A family is held against
# the model's largest gradient scale so far (tolerance.h kDeadGradient); it passes, and attention's
# gradient x 1.1 still fails at step 0.
set(PARITY_FIXED_CASE ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/bf16_converged_fixed_point.json)
add_test(NAME verdict.bf16_converged_fixed_point_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_FIXED_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_converged_fixed_point_pass PROPERTIES
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
add_test(NAME verdict.bf16_converged_fixed_point_fault_fails
         COMMAND sh -c "PARITY_FAULT=scale_grad:attention:1.1 $<TARGET_FILE:parity> run ${PARITY_FIXED_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_converged_fixed_point_fault_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: grad attention at step 0[^\n]*\n.*exit=1\n")
set_tests_properties(verdict.bf16_converged_fixed_point_pass verdict.bf16_converged_fixed_point_fault_fails PROPERTIES
  LABELS "verdict;multiprocess" TIMEOUT 120)
# Issue 41, the last bf16 false alarm of ci/calibrate (seed 41044, drawn1399): dim 2, vocab 2, pp 2 x cp 4,
# ep 2. The model's gradient fell 2000x by step 4 (rms 5.2e-2 -> 2.4e-5) while its experts' gradients sat at
# 1e-9: dead families, whose rows' floors take the model's largest scale so far (bounds 23 and 33), but whose
# far elements were measured against the step's scale: 83% and 29% of them far, and the optimizer's taken
# gradient with them. A dead family's elements are now held against the same largest scale (family_sums.h
# hold_model_peak, verdict_taken.h); it passes, and the embedding's gradient x 1.1 still fails at step 0.
set(PARITY_DEAD_CASE ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/bf16_dead_family_far_peak.json)
add_test(NAME verdict.bf16_dead_family_far_peak_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_DEAD_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_dead_family_far_peak_pass PROPERTIES
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
add_test(NAME verdict.bf16_dead_family_far_peak_fault_fails
         COMMAND sh -c "PARITY_FAULT=scale_grad:embedding:1.1 $<TARGET_FILE:parity> run ${PARITY_DEAD_CASE} --precision bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_dead_family_far_peak_fault_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: grad embedding at step 0[^\n]*\n.*exit=1\n")
set_tests_properties(verdict.bf16_dead_family_far_peak_pass verdict.bf16_dead_family_far_peak_fault_fails PROPERTIES
  LABELS "verdict;multiprocess" TIMEOUT 120)
# Issue 41, bf16-reduce-bf16 on the property generator's layouts (21 of 100 false alarms at seed
# 16016, every one with tp or cp and one sequence a step): a layout's partial sums are over tokens
# (tp lanes, cp chunks), which the twin (partial sums over sequences) cannot see. Each grad row
# also allows what the policy's roundings may move, 4u x the sum of |partials| its reductions
# added (tolerance.h kReduceRounding). This case (cp 2, tp 3 with sp, ep 6, one sequence of 12
# tokens) failed 10 rows at step 0; it passes, and the router's gradient x 1.05 still fails.
set(PARITY_REDUCE_CASE ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/bf16_reduce_token_partials.json)
add_test(NAME verdict.bf16_reduce_token_partials_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_REDUCE_CASE} 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_token_partials_pass PROPERTIES
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
add_test(NAME verdict.bf16_reduce_token_partials_fault_fails
         COMMAND sh -c "PARITY_FAULT=scale_grad:router:1.05 $<TARGET_FILE:parity> run ${PARITY_REDUCE_CASE} 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_token_partials_fault_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: grad router at step 0[^\n]*\n.*exit=1\n")
set_tests_properties(verdict.bf16_reduce_token_partials_pass verdict.bf16_reduce_token_partials_fault_fails
  PROPERTIES LABELS "verdict;multiprocess" TIMEOUT 120)
# Issue 41, a false alarm of ci/calibrate (seed 22022, drawn2014): one token, dim 8, sgd, 26 steps; at step
# 21 every gradient family moved 3-6% within its bound (the model's floors) and the grad norm 4.8% against
# its twin's 2.5%, named "the total is added wrong". The grad norm's row allows what its families'
# gradients move it by (verdict_detail.h norm_explained_by_families); a grad norm x 1.02 still fails.
set(PARITY_NORM_CASE ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/bf16_reduce_one_token_norm.json)
add_test(NAME verdict.bf16_reduce_one_token_norm_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_NORM_CASE} --precision bf16-reduce-bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_one_token_norm_pass PROPERTIES
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
add_test(NAME verdict.bf16_reduce_one_token_norm_fault_fails
         COMMAND sh -c "PARITY_FAULT=scale_grad_norm:all:1.02 $<TARGET_FILE:parity> run ${PARITY_NORM_CASE} --precision bf16-reduce-bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_one_token_norm_fault_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: grad_norm at step 0[^\n]*\n.*exit=1\n")
# Where the families do move at step 0 (the token-partials case above), a grad norm x 1.02 fails there too.
add_test(NAME verdict.bf16_reduce_one_token_norm_partials_fault_fails
         COMMAND sh -c "PARITY_FAULT=scale_grad_norm:all:1.02 $<TARGET_FILE:parity> run ${PARITY_REDUCE_CASE} 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_one_token_norm_partials_fault_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: grad_norm at step 0[^\n]*\n.*exit=1\n")
set_tests_properties(verdict.bf16_reduce_one_token_norm_pass verdict.bf16_reduce_one_token_norm_fault_fails
  verdict.bf16_reduce_one_token_norm_partials_fault_fails PROPERTIES LABELS "verdict;multiprocess" TIMEOUT 120)
# Issue 41 x issue 47: kv_heads 1 under tp 2 replicates wv inside the attention family; under
# bf16-reduce-bf16 Adam moved one wv element whose gradient's sign the bf16 reductions flipped: the
# counted copies' error (3.7e-3) sat within its explained update, and over every copy (wv counted twice)
# it read 4.3e-3, "replicas disagree" though every copy agreed. The every-copy check allows sqrt(copies).
add_test(NAME verdict.bf16_reduce_replicated_kv_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PROJECT_SOURCE_DIR}/scenarios/qwen3_moe_like_fsdp2_tp2_sp_ep4.json --precision bf16-reduce-bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_replicated_kv_pass PROPERTIES
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n" LABELS "verdict;multiprocess" TIMEOUT 120)
# The same model dumped in bf16 and compared with a copy of itself (parity compare): its twin's
# noise on the router (all cancellation) reaches 3.2, over the ceiling a forged manifest is held
# to; a genuine reference is accepted, the noise held at the ceiling (it was refused, exit 2).
set(PARITY_DIM2_DIR ${CMAKE_CURRENT_BINARY_DIR}/dim2_dump)
add_test(NAME compare.bf16_dim2_reference_is_accepted
         COMMAND sh -c "rm -rf ${PARITY_DIM2_DIR} && mkdir -p ${PARITY_DIM2_DIR} && $<TARGET_FILE:parity> dump ${PARITY_DIM2_CASE} ${PARITY_DIM2_DIR}/ref --precision bf16 >/dev/null && cp -r ${PARITY_DIM2_DIR}/ref ${PARITY_DIM2_DIR}/got && $<TARGET_FILE:parity> compare ${PARITY_DIM2_DIR}/ref ${PARITY_DIM2_DIR}/got 2>&1; echo exit=$?")
set_tests_properties(compare.bf16_dim2_reference_is_accepted PROPERTIES
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n" LABELS "verdict;compare" TIMEOUT 120)
# Issue 41, found this round: every resume check with a reduction failed under bf16-reduce-bf16 at its
# resumed step (16 of the 22 shipped; the calibration left resume phases out): phase 2 restarted the
# replay of the baseline's moments from its own, so phase 1's legitimate 16-bit roundings in them stood
# unexplained. Phase 1 now hands its moments state to phase 2 (harness/runner/verdict_carry.h): every
# shipped resume check passes, on the simulated world (the same verdict as gloo's, ci/sim_vs_gloo).
# The checkpoint bugs still fail at the resumed step in that policy (a moment carried wrong is not
# taken up: ckpt_v_from_m_buffer, adam_step_not_restored).
file(GLOB PARITY_RESUME_CHECKS ${PROJECT_SOURCE_DIR}/scenarios/resume_*.json ${PROJECT_SOURCE_DIR}/scenarios/pw_resume_*.json)
add_test(NAME verdict.bf16_reduce_resume_checks_pass
         COMMAND $<TARGET_FILE:parity> matrix --backend sim -j 2 --precision bf16-reduce-bf16 ${PARITY_RESUME_CHECKS})
set_tests_properties(verdict.bf16_reduce_resume_checks_pass PROPERTIES LABELS "verdict;sim" TIMEOUT 300
  PASS_REGULAR_EXPRESSION "matrix verdict: PASS: 2[0-9] passed, 0 failed")
add_test(NAME verdict.bf16_reduce_resume_checkpoint_bugs_fail
         COMMAND $<TARGET_FILE:parity> zoo -j 2 --backend sim --precision bf16-reduce-bf16
                 --scenarios ${PROJECT_SOURCE_DIR}/scenarios ckpt_v_from_m_buffer adam_step_not_restored)
set_tests_properties(verdict.bf16_reduce_resume_checkpoint_bugs_fail PROPERTIES LABELS "verdict;sim;zoo" TIMEOUT 120
  PASS_REGULAR_EXPRESSION "ckpt_v_from_m_buffer +resume_fsdp3_to_fsdp4.json +ok +[0-9.]+s  param head at step 3.*\nadam_step_not_restored +resume_fsdp3_to_fsdp4.json +ok .*zoo verdict: PASS: 2 bugs, 2 caught")
# Issue 41's last open part (twentieth round): under the step-local verdict bf16-reduce-bf16's grad rows compare
# each reduction's exact result (nothing rounded) with the baseline's gradient before its rounding, at bf16's bounds,
# and hold every rounded element to kReduceRounding x its partials' magnitude (verdict_part.cpp add_tensors). Eight bugs
# its widened bounds hid or misnamed (1.07x to 3.7x) are caught, named and >= 10x now; optim_state_in_bf16 too since
# the twenty-first round (the taken gradient held to the one the rank holds, verdict_taken.h Held: step 0, 2.3e3x).
add_test(NAME verdict.bf16_reduce_zoo_separation
         COMMAND ${PROJECT_SOURCE_DIR}/ci/calibrate --parity $<TARGET_FILE:parity> --zoo --precision bf16-reduce-bf16
                 -j 2 -- --backend sim gather_backward_drops_peers combine_weights_twice_ep qk_norm_after_rope
                 qk_norm_not_summed_tp norm_counts_replicas alltoallv_counts_off_by_one grad_accum_in_bf16
                 cross_entropy_in_bf16 ckpt_v_from_m_buffer optim_state_in_bf16)
set_tests_properties(verdict.bf16_reduce_zoo_separation PROPERTIES
  PASS_REGULAR_EXPRESSION "zoo verdict: PASS: 10 bugs, 10 caught.*\nsmallest +([1-9][0-9]+(\\.[0-9]*)?)\nzoo: PASS"
  LABELS "verdict;zoo;sim" TIMEOUT 300)
# The trajectory verdict under bf16-reduce-bf16 is refused (exit 2): it has no bound for what the policy's
# reductions do to Adam's update, and the shipped fsdp2 failed 7 of its 24 rows at step 0 (twentieth round).
add_test(NAME verdict.bf16_reduce_trajectory_refused
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/fsdp2.json --precision bf16-reduce-bf16 --trajectory 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_trajectory_refused PROPERTIES LABELS "verdict"
  PASS_REGULAR_EXPRESSION "\\$\\.verdict: the trajectory verdict does not bound[^\n]*step-local[^\n]*\nexit=2\n"
  FAIL_REGULAR_EXPRESSION "parity launch")
# The rounding check itself: the reduced gradients moved by 5% (no rounding of the policy moves an element by more
# than 4 x 2^-8 of its partials) fail at step 0 although their exact reductions are untouched; moved by 0.1%, within
# what the roundings may move, they pass (the exact reductions are what the row compares there).
add_test(NAME verdict.bf16_reduce_rounding_past_the_policy_fails
         COMMAND sh -c "PARITY_FAULT=scale_rounded_grad:head:1.05 $<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/fsdp2.json --precision bf16-reduce-bf16 --steps 2 --backend sim 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_rounding_past_the_policy_fails PROPERTIES LABELS "verdict;sim"
  PASS_REGULAR_EXPRESSION "\nroot: grad head at step 0[^\n]*\n.*verdict: FAIL: 1 of [0-9]+ rows[^\n]*\n.*exit=1\n")
add_test(NAME verdict.bf16_reduce_rounding_within_the_policy_passes
         COMMAND sh -c "PARITY_FAULT=scale_rounded_grad:head:1.001 $<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/fsdp2.json --precision bf16-reduce-bf16 --steps 2 --backend sim 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_rounding_within_the_policy_passes PROPERTIES LABELS "verdict;sim"
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
# Issue 41, a false alarm of ci/calibrate (seeds 27027 and 28028, two pairwise resume layouts' phase 1):
# Adam with L2 weight decay 0.1, an element whose gradient (6e-6) sits beside its decay term (2.4e-4).
# The replay of the moments takes g out and adds wd w back in fp32, a unit of that sum apart: 2.9e-12
# in m against a tolerance of 1.6e-12 that ignored the decay's magnitude, so the replay stopped and the
# update the reduction explained stood unexplained (param dense_mlp at 1.6x its bound at step 1). The
# tolerance now holds the rounding of g + wd w at its own magnitude (verdict_taken.h); a moment kept in
# bf16 still fails, at step 0 now: the gradient it took is held to the one the rank holds (verdict_taken.h Held).
set(PARITY_L2_CASE ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/bf16_reduce_adam_l2_tiny_grad.json)
add_test(NAME verdict.bf16_reduce_adam_l2_tiny_grad_pass
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_L2_CASE} --precision bf16-reduce-bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_adam_l2_tiny_grad_pass PROPERTIES
  PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
add_test(NAME verdict.bf16_reduce_adam_l2_tiny_grad_state_in_bf16_fails
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PARITY_L2_CASE} --precision bf16-reduce-bf16 --inject optim_state_in_bf16 2>&1; echo exit=$?")
set_tests_properties(verdict.bf16_reduce_adam_l2_tiny_grad_state_in_bf16_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "root: param [a-z_]+ at step 0[^\n]*rounded to bf16[^\n]*\n.*exit=1\n")
set_tests_properties(verdict.bf16_reduce_adam_l2_tiny_grad_pass verdict.bf16_reduce_adam_l2_tiny_grad_state_in_bf16_fails
  PROPERTIES LABELS "verdict;multiprocess" TIMEOUT 120)
# Issue 48, fp8-delayed's false alarms of ci/calibrate seed 48125 (docs/precision.md "fp8, delayed
# scaling"), each a drawn case that failed before and passes now: four (cal 202, 610, 1110, 1221) were
# single E5M2 flips of tiny models (dim 2 to 12) at steps 2 to 22 that the twin's 64-ulp jitter did not
# make (a layout's gradient and its amax move by a few fp32 ulps, 2.1e-4 where a flip upstream moved
# an amax); pp2_dp2_ep2_dim2 (cal 224) failed the same way once the first step went unquantized and
# passes at 2048 ulps (kFp8DelayedGradJitterUlps); tp3_sp_ep3_zero_dq (cal 234) has an attention whose
# dq, dk are zero at step 0 but for rounding (6e-12 in the baseline, 0 in the layout): the baseline's
# scale from that amax saturated step 1's real dq; tp4_ep4_qknorm_zero_dq (seed 48201, cal 1463) the
# same at 4.4e-10, which an absolute floor of 2^-32 missed: an amax at most 2^-24 of the largest of its
# format is none (kFp8AmaxRounding). Each passes,
# and its attention gradient x 1.1 still fails at step 0.
# tp7_ep7_dim28 (issue 48f, seed 48322, cal 2838): one element of layer 1's wo output gradient at step 1,
# 1 fp32 ulp from an E5M2 tie (36864 at its scale), flipped by the layout (a 25% move, grad attention 4.5%
# off) and by neither twin (independent signs: 1 in 4); the pair flips it in one of them.
foreach(name cp2_tp2_etp2_dim4 dp2_tp2_ep4_dim12 tp3_etp3_dim12 fsdp5_ep5_dim2 pp2_dp2_ep2_dim2 tp3_sp_ep3_zero_dq
             tp4_ep4_qknorm_zero_dq tp7_ep7_dim28)
  set(case ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/fp8_delayed_${name}.json)
  add_test(NAME fp8.delayed_${name}_pass
           COMMAND sh -c "$<TARGET_FILE:parity> run ${case} --backend sim 2>&1; echo exit=$?")
  set_tests_properties(fp8.delayed_${name}_pass PROPERTIES PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n")
  add_test(NAME fp8.delayed_${name}_fault_fails
           COMMAND sh -c "PARITY_FAULT=scale_grad:attention:1.1 $<TARGET_FILE:parity> run ${case} --backend sim 2>&1; echo exit=$?")
  set_tests_properties(fp8.delayed_${name}_fault_fails PROPERTIES
    PASS_REGULAR_EXPRESSION "root: grad attention at step 0[^\n]*\n.*exit=1\n")
  set_tests_properties(fp8.delayed_${name}_pass fp8.delayed_${name}_fault_fails PROPERTIES
    LABELS "verdict;multiprocess;fp8" TIMEOUT 120)
endforeach()
# fp8-delayed's zoo separations (its three bugs' root rows over their bounds, and tp_reduce_in_bf16's): at
# least 10x since a tensor without history is not quantized (1.54x and 1.35x when its first step
# quantized with scale 1) and since the twin's E5M2 jitter is 4 ulps of the row and 1024 of the element
# (tp_reduce_in_bf16 6.91x at 2048 of the element; issue 48e). The sixteenth round's two pairs of delayed twins took
# tp_reduce_in_bf16 to 9.7x; one pair, measured again (nineteenth round, tolerance.cpp), 12.1x: every bug >= 10x.
add_test(NAME fp8.delayed_zoo_separation
         COMMAND ${PROJECT_SOURCE_DIR}/ci/calibrate --parity $<TARGET_FILE:parity> --zoo --precision fp8-delayed -j 2
                 -- --backend sim fp8_delayed_amax_local fp8_history_per_microbatch fp8_history_not_restored
                 tp_reduce_in_bf16 fp8_weight_cache_not_refreshed fp8_partial_sum_quantized)
set_tests_properties(fp8.delayed_zoo_separation PROPERTIES
  PASS_REGULAR_EXPRESSION "zoo verdict: PASS:.*\nsmallest +([1-9][0-9]+(\\.[0-9]*)?)\nzoo: PASS" LABELS "verdict;zoo;fp8"
  TIMEOUT 300)
# Issue 48e, fp8 (current scaling)'s twin at the E5M2 points (docs/precision.md "fp8"): 4 fp32 ulps of the
# row's amax and 256 of the element. At 2048 ulps of the element (before) the zoo's smallest separation was
# 3.26x (qk_norm_not_summed_tp), cp_kv_grad_local 4.77x; these are >= 10x and named now. Every one named (the zoo's
# PASS): qk_norm_after_rope was named grad head until issue 48g (docs/verdict.md, a forward divergence).
add_test(NAME fp8.current_zoo_separation
         COMMAND ${PROJECT_SOURCE_DIR}/ci/calibrate --parity $<TARGET_FILE:parity> --zoo --precision fp8 -j 2
                 -- --backend sim qk_norm_not_summed_tp cp_kv_grad_local alltoallv_counts_off_by_one
                 rope_local_positions_cp rope_contiguous_positions_balanced_cp qk_norm_after_rope
                 fp8_weight_cache_not_refreshed fp8_partial_sum_quantized)
set_tests_properties(fp8.current_zoo_separation PROPERTIES
  PASS_REGULAR_EXPRESSION "zoo verdict: PASS:.*\nsmallest +([1-9][0-9]+(\\.[0-9]*)?)\n" LABELS "verdict;zoo;fp8"
  TIMEOUT 300)
# Layouts that fail with the twin's E5M2 jitter at 8 ulps of the element alone (three shipped: grad
# shared_experts at step 4, grad attention at step 8, grad routed_experts at step 1; a layout's reordered sums
# move an element by ulps of its row) or at 4 ulps of the row with up to 16 of the element (two drawn, seed
# 48311: tp 8 with dim 32, 2 tokens; pp 2 x tp 2 x ep 4 with dim 2, 1 token), and pass at 4 of the row and
# 256 of the element.
# fp8.current_NAME_pass: `parity run ARGS --backend sim` passes (ARGS: the file and its options, one string).
function(fp8_current_pass name args)
  add_test(NAME fp8.current_${name}_pass
           COMMAND sh -c "$<TARGET_FILE:parity> run ${args} --backend sim 2>&1; echo exit=$?")
  set_tests_properties(fp8.current_${name}_pass PROPERTIES PASS_REGULAR_EXPRESSION "verdict: PASS[^\n]*\n.*exit=0\n"
    LABELS "verdict;multiprocess;fp8" TIMEOUT 120)
endfunction()
foreach(name fsdp2_tp2_sp_uneven_b3_mb2 pw_pp2_gpipe_zero1_dp2_tp2_ep4_rmsnorm_mixed
             pw_pp2_interleaved2_zero2_dp2_etp2_qknorm)
  fp8_current_pass(${name} "${PROJECT_SOURCE_DIR}/scenarios/${name}.json --precision fp8")
endforeach()
# Issue 48f: the false alarms of ci/calibrate --precision fp8 seed 48321 (cal 1442, 3289, 3335, 3806: fsdp 5 x
# ep 5, cp 2 x ep 2, tp 3 + SP x ep 3, cp 2 x etp 2), each failing at PARITY_TWIN_STREAM 0 before (and at
# 1 to 3 of the 7 streams 0, 2, .., 12) and passing at streams 0 to 18 since the pair of twins moves each
# E5M2 element in opposite directions and current scaling's jitter has no element part.
# dp2_tp2_ep2_etp2_dim8 (seed 48411, cal 619): fails with one pair (3 of 7 streams), passes with two.
foreach(name tp8_ep2_etp2_dim32 pp2_tp2_ep4_dim2 fsdp5_ep5_dim2 cp2_ep2_dim2 tp3_sp_ep3_dim18 cp2_etp2_dim2
             dp2_tp2_ep2_etp2_dim8)
  fp8_current_pass(${name} "${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/fp8_current_${name}.json")
endforeach()
# Issue 48, fourteenth round: the three false alarms of ci/calibrate seed 52001 (3000 draws per policy,
# --backend sim): fp8 cal16142 and cal17392, fp8-delayed cal20037, kept as harness/cases/fp8_*_twin_miss.json.
# Each is the twins missing a flip the layout took. With four pairs of fp8 twins (fifteenth round, tolerance.cpp
# kFp8TwinsWhereFlipsAreFew 4 -> 8) cal17392 passes at PARITY_TWIN_STREAM 0..8 (it failed at 0 and 1): registered.
# cal16142 (fp8, grad layernorm 1.3x at step 4 at stream 0; passes 1..8): measured again, below (eighteenth round).
# cal20037 (fp8-delayed, grad router at step 11, 3.9x at stream 0 with one pair) passed at streams 0..8 with two
# pairs of delayed twins (sixteenth round); since the nineteenth it is measured again (below), and passes at 1..8.
fp8_current_pass(fsdp4_tp2_ep2_etp2_twin_miss
  "${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/fp8_current_fsdp4_tp2_ep2_etp2_twin_miss.json --precision fp8")
# Eighteenth round, measured again (docs/verdict.md "Measured again"): a failure at rounding level is judged once
# more by more twins (tolerance.h twin_sets_again: fp8 8 -> 16, fp8-delayed 2 -> 8 since the nineteenth round).
# cal16142 (fp8, grad layernorm 1.3x at step 4 with 8 twins), cal01011 (fp8-delayed, grad router 1.1x at step 17)
# and cal20037 (fp8-delayed, grad router 3.8x at step 11 with 2, the grad norm failed by the router's part) each
# pass measured again; so does cal03461 (fp8-delayed, grad head at step 9: 13.9% far against 5%) since the second
# look takes the twins' whole run (their step 12 moved 10.7% of the head's gradient far); with
# PARITY_MEASURE_AGAIN=0 they fail at rounding level.
# verdict.measured_again_NAME passes measured again (FIRST twins, then AGAIN: regex parts) and
# verdict.measured_once_NAME fails at rounding level with PARITY_MEASURE_AGAIN=0: CASE under POLICY, sim.
function(measured_again_pair name case policy first again labels)
  add_test(NAME verdict.measured_again_${name}
           COMMAND sh -c "$<TARGET_FILE:parity> run ${case} --precision ${policy} --backend sim 2>&1; echo exit=$?")
  set_tests_properties(verdict.measured_again_${name} PROPERTIES PASS_REGULAR_EXPRESSION
    "\nmeasured again: the first measurement \\(${first} twins\\) failed at rounding level, [^\n]*this verdict is the one of ${again} twins\n.*verdict: PASS[^\n]*\n.*exit=0\n"
    LABELS "${labels}" TIMEOUT 180)
  add_test(NAME verdict.measured_once_${name}
           COMMAND sh -c "PARITY_MEASURE_AGAIN=0 $<TARGET_FILE:parity> run ${case} --precision ${policy} --backend sim 2>&1; echo exit=$?")
  set_tests_properties(verdict.measured_once_${name} PROPERTIES PASS_REGULAR_EXPRESSION
    "root: [^\n]*at rounding level: [^\n]*\n.*verdict: FAIL[^\n]*\n.*exit=1\n" FAIL_REGULAR_EXPRESSION "measured again"
    LABELS "${labels}" TIMEOUT 120)
endfunction()
foreach(case fp8_current_w8_tp4_ep2_etp2_twin_miss:fp8 fp8_delayed_ds_w8_tp2_ep4_twin_miss:fp8-delayed
             fp8_delayed_tp2_twin_miss:fp8-delayed fp8_delayed_pp2_1f1b_cp2_tp2_sp_ep2_far_head:fp8-delayed)
  string(REPLACE ":" ";" pair "${case}")
  list(GET pair 0 name)
  list(GET pair 1 policy)
  measured_again_pair(${name} ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/${name}.json ${policy} "[28]" "(8|16)"
                      "verdict;multiprocess;fp8")
endforeach()
# Twenty-first round, bf16 storage measured again too (tolerance.cpp kBf16TwinSetsAgain): ci/calibrate seed 66001's
# cal02552 (w4_tp2_ep4, dim 16, adamw) failed under bf16 and bf16-reduce-bf16 at twin streams 0-2 and 7-9 of 0..11,
# grad routed_experts at step 0 1.6x-2.4x its bound: one router score a bf16 ulp apart moved one token's share of an
# expert's gradient, a flip neither twin took. Measured again by four twins it passes at each of those streams.
foreach(policy bf16 bf16-reduce-bf16)
  measured_again_pair(bf16_router_flip_${policy} ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/bf16_w4_tp2_ep4_router_flip.json
                      ${policy} 2 4 "verdict;sim")
endforeach()
# cal01011 at twin stream 1: the head's gradient 58% far against the pair's 29% (an E4M3 flip spreads over most of a
# family): at rounding level under fp8 (verdict_root.cpp rounding_level), measured again, a pass.
add_test(NAME verdict.measured_again_fp8_delayed_ds_w8_stream1
         COMMAND sh -c "PARITY_TWIN_STREAM=1 $<TARGET_FILE:parity> run \
${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/fp8_delayed_ds_w8_tp2_ep4_twin_miss.json --precision fp8-delayed \
--backend sim 2>&1; echo exit=$?")
set_tests_properties(verdict.measured_again_fp8_delayed_ds_w8_stream1 PROPERTIES PASS_REGULAR_EXPRESSION
  "\nmeasured again: the first measurement \\(2 twins\\)[^\n]*\n.*verdict: PASS[^\n]*\n.*exit=0\n"
  LABELS "verdict;multiprocess;fp8" TIMEOUT 180)
# A bug as small as rounding is measured again and still fails: rank 1's attention gradients x 1.0008 (fp8, the
# row 2.3x its bound) in one step, whose second look is its 16 twins. Over two steps it passes measured again: the
# twins moved that gradient by 5.0e-4 at step 1, and every step's bound takes the whole run's noise (nineteenth
# round), so it is as small as this run's rounding; a fault over kRoundingLevel (x 1.002, 4.9x) is never measured
# again and fails. The same fault in fp32 is not measured again (fp8 and bf16 storage only: tolerance.h); and the knob
# takes 0 or 1 only.
# verdict.NAME: rank 1's attention gradients x FACTOR on fsdp2_tp2 for STEPS steps under PRECISION print PASS_RE, and
# FAIL_RE ("" for none) nowhere.
function(attention_fault name factor steps precision labels pass_re fail_re)
  add_test(NAME verdict.${name}
           COMMAND sh -c "PARITY_FAULT=scale_grad:attention:${factor}@1 $<TARGET_FILE:parity> run \
${PARITY_SCENARIO_DIR}/fsdp2_tp2.json --steps ${steps} --precision ${precision} 2>&1; echo exit=$?")
  set_tests_properties(verdict.${name} PROPERTIES PASS_REGULAR_EXPRESSION "${pass_re}" LABELS "${labels}" TIMEOUT 120)
  if(fail_re)
    set_tests_properties(verdict.${name} PROPERTIES FAIL_REGULAR_EXPRESSION "${fail_re}")
  endif()
endfunction()
attention_fault(measured_again_bug_still_fails 1.0008 1 fp8 "verdict;multiprocess;fp8"
  "\nmeasured again: the first measurement \\(8 twins\\) failed at rounding level, [^\n]*16 twins\n.*\nFAIL +grad +attention .*verdict: FAIL[^\n]*\n.*exit=1\n" "")
attention_fault(over_rounding_level_not_measured_again 1.002 2 fp8 "verdict;multiprocess;fp8"
  "\nFAIL +grad +attention .*verdict: FAIL[^\n]*\n.*exit=1\n" "measured again")
# bf16 (twenty-first round): x 1.001 is 2.4x the attention row's floor at step 0 on fsdp2_tp2; measured again by four
# twins over three steps, their whole run's noise (1.2e-3 at step 2) covers the 5.9e-4 its own two left under the
# floor, yet the root row stays over its bound (1.7x) and fails. (x 1.0005, 1.2x, passes measured again there.)
attention_fault(measured_again_bug_still_fails_bf16 1.001 3 bf16 "verdict;multiprocess"
  "\nmeasured again: the first measurement \\(2 twins\\) failed at rounding level, [^\n]*4 twins\n.*\nFAIL +grad +attention .*verdict: FAIL[^\n]*\n.*exit=1\n" "")
attention_fault(measured_once_outside_fp8 1.003 2 fp32 "verdict;multiprocess"
  "root: [^\n]*at rounding level: [^\n]*\n.*verdict: FAIL[^\n]*\n.*exit=1\n" "measured again")
add_test(NAME verdict.measure_again_knob_is_checked
         COMMAND sh -c "PARITY_MEASURE_AGAIN=yes $<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/tp2.json --steps 1 \
--backend sim 2>&1; echo exit=$?")
set_tests_properties(verdict.measure_again_knob_is_checked PROPERTIES PASS_REGULAR_EXPRESSION
  "PARITY_MEASURE_AGAIN: must be 0 or 1, got 'yes'.*exit=2\n" LABELS "verdict;multiprocess" TIMEOUT 60)
# Sixteenth round, ci/calibrate --precision fp8-delayed -n 3000 --seed 59001 -- --backend sim, two pairs of delayed
# twins: 2 false alarms, each run with --precision fp8-delayed --backend sim:
# harness/cases/fp8_delayed_ds_w8_tp2_ep4_twin_miss.json (cal01011: grad router at step 17, 5.34e-3 against
# 4.80e-3; fails at twin stream 0 of 0..5, at 0..2 with one pair; measured again since the eighteenth round, above)
# and fp8_delayed_pp2_1f1b_cp2_tp2_sp_ep2_far_head.json (cal03461: grad head at step 9, normwise 6.2e-4 within its
# 9.2e-4 but 13.9% of its elements far against 5%; fails at every stream with one pair or two, and with 32 twins
# over steps 0..9: no twin moved that gradient so at a step before; passes measured again since the nineteenth
# round, above: the twins' step 12 did).

# A vocab of 24 over tp 7 leaves the last lane no columns of the head: its trace record divided
# by its zero width (pmodel.cpp rec), a SIGFPE wherever the compiler hoisted the division above
# record's check (calibration fp8-delayed seed 48322, draw cal02838). Traced on request, it passes.
add_test(NAME verdict.tp7_vocab24_traced
         COMMAND sh -c "$<TARGET_FILE:parity> run ${CMAKE_CURRENT_SOURCE_DIR}/harness/cases/tp7_vocab24_trace.json \
--backend sim --precision fp32 --trace 2>&1; echo exit=$?")
set_tests_properties(verdict.tp7_vocab24_traced PROPERTIES
  PASS_REGULAR_EXPRESSION "no traced tensor over its bound\n.*verdict: PASS[^\n]*\n.*exit=0\n")

# Floors first (harness/runner/floors_first.h, docs/verdict.md "Floors first"): an fp64 run within its floors passes
# without its rounding twin (the report says so; every row's twin 0: the host's baseline trained none), and
# one that fails them is measured again with its twin, under the launcher's shared baseline (its second one trained
# by a rank), under the simulated world and with a baseline in every rank; no second file is left in TMPDIR.
set(floors_dir ${CMAKE_CURRENT_BINARY_DIR}/floors_first)
add_test(NAME verdict.floors_first_pass_without_twin
         COMMAND sh -c "rm -rf ${floors_dir}/pass && mkdir -p ${floors_dir}/pass && TMPDIR=${floors_dir}/pass $<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/fsdp2_tp2.json --steps 3 --report ${floors_dir}/pass.json 2>&1; echo exit=$?; cat ${floors_dir}/pass.json; echo; echo left: $(ls ${floors_dir}/pass)")
set_tests_properties(verdict.floors_first_pass_without_twin PROPERTIES PASS_REGULAR_EXPRESSION
  "\ntwin: not run: every row is within its floor[^\n]*\n.*\n +2 +[0-9]+\\.[0-9]+ [^\n]*\n.*verdict: PASS[^\n]*\n.*exit=0\n.*\"twin\": 0\\.0,.*\nleft:\n"
  FAIL_REGULAR_EXPRESSION "\"twin\": [0-9.]*[1-9]|measured again" LABELS "verdict;multiprocess" TIMEOUT 120)
add_test(NAME verdict.floors_first_off_measures_twin
         COMMAND sh -c "PARITY_FLOORS_FIRST=0 $<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/fsdp2_tp2.json --steps 3 --report ${floors_dir}/off.json 2>&1; echo exit=$?; cat ${floors_dir}/off.json")
set_tests_properties(verdict.floors_first_off_measures_twin PROPERTIES PASS_REGULAR_EXPRESSION
  "verdict: PASS[^\n]*\n.*exit=0\n.*\"twin\": [0-9.]*[1-9]" FAIL_REGULAR_EXPRESSION "twin: not run|measured again"
  LABELS "verdict;multiprocess" TIMEOUT 120)
add_test(NAME verdict.floors_first_bad_knob
         COMMAND sh -c "PARITY_FLOORS_FIRST=yes $<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/fsdp2_tp2.json --steps 1 2>&1; echo exit=$?")
set_tests_properties(verdict.floors_first_bad_knob PROPERTIES PASS_REGULAR_EXPRESSION
  "PARITY_FLOORS_FIRST[^\n]*must be 0 or 1, got 'yes'.*exit=2\n" LABELS "verdict;cli" TIMEOUT 60)
foreach(how shared:gloo sim:sim own:gloo)
  string(REPLACE ":" ";" pair "${how}")
  list(GET pair 0 name)
  list(GET pair 1 backend)
  set(env "TMPDIR=${floors_dir}/${name}")
  if(name STREQUAL "own")
    set(env "${env} PARITY_SHARED_BASELINE=0")
  endif()
  add_test(NAME verdict.floors_first_fault_measured_with_twin_${name}
           COMMAND sh -c "rm -rf ${floors_dir}/${name} && mkdir -p ${floors_dir}/${name} && ${env} PARITY_FAULT=scale_grad:attention:1.001 $<TARGET_FILE:parity> run ${PARITY_SCENARIO_DIR}/fsdp2_tp2.json --steps 3 --backend ${backend} --report ${floors_dir}/${name}.json 2>&1; echo exit=$?; cat ${floors_dir}/${name}.json; echo; echo left: $(ls ${floors_dir}/${name})")
  set_tests_properties(verdict.floors_first_fault_measured_with_twin_${name} PROPERTIES PASS_REGULAR_EXPRESSION
    "\ntwin: run after the floors alone failed it \\(floors first\\): this verdict is the one with its twin\n.*FAIL +grad +attention[^\n]*\n.*verdict: FAIL[^\n]*\n.*exit=1\n.*\"twin\": [0-9.]*[1-9].*\nleft:\n"
    FAIL_REGULAR_EXPRESSION "twin: not run" LABELS "verdict;multiprocess" TIMEOUT 180)
endforeach()
