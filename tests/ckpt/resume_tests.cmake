# Checkpoints in training runs (issue 7) through the real command, `parity run`:
#   ckpt.run.save_a_resume_b       --save-at under fsdp4_tp2, --resume under hsdp2x2_tp2_ep2_etp2
#                                  (strided shards both ways): both verdicts PASS, exit 0
#   ckpt.run.seed_w1_to_fsdp8      the baseline (W = 1) writes a seed checkpoint, fsdp8 starts from it
#   ckpt.run.w1_resume_bitwise     W = 1 save at 2 and resume: steps 2..3 print the same as the
#                                  run that never stopped
#   ckpt.run.wrong_state_fails     a resumed state that is not the baseline's (the optimizer
#                                  step not restored) is caught (exit 1): the comparison can fire
#   ckpt.run.refuses.other_seed    another seed's checkpoint: refused, exit 2, $.run.seed
#   ckpt.run.refuses.*             a flipped byte, a truncated file, a deleted rank file, another
#                                  model config: refused with the message, non-zero exit
# The scenario files with a "resume" object (scenarios/resume_*.json) are registered by
# tests/scenarios.cmake like every other scenario.
set(PARITY_RESUME_SCRATCH ${CMAKE_CURRENT_BINARY_DIR}/ckpt-resume)
set(PARITY_RESUME_SCEN ${PROJECT_SOURCE_DIR}/scenarios)
file(MAKE_DIRECTORY ${PARITY_RESUME_SCRATCH})

# Scenario variants written at configure time (same model, other layout / seed / config).
function(parity_resume_variant out src)
  file(READ ${PARITY_RESUME_SCEN}/${src}.json text)
  set(i 0)
  list(LENGTH ARGN n)
  while(i LESS n)
    list(GET ARGN ${i} key)
    math(EXPR j "${i} + 1")
    list(GET ARGN ${j} value)
    string(REPLACE "." ";" path "${key}")
    string(JSON text SET "${text}" ${path} "${value}")
    math(EXPR i "${i} + 2")
  endwhile()
  file(WRITE ${PARITY_RESUME_SCRATCH}/${out}.json "${text}")
endfunction()
file(READ ${PARITY_RESUME_SCEN}/hsdp2x2_tp2_ep2_etp2.json PARITY_HSDP_TEXT)
string(JSON PARITY_HSDP_LAYOUT GET "${PARITY_HSDP_TEXT}" layout)
parity_resume_variant(b_hsdp fsdp4_tp2 layout "${PARITY_HSDP_LAYOUT}")
parity_resume_variant(w1 fsdp8 layout "{\"world\": 1}")
parity_resume_variant(fsdp4_seed99 fsdp4 seed 99)
parity_resume_variant(fsdp4_hidden64 fsdp4 model.mlp_hidden 64)

set(P $<TARGET_FILE:parity>)
set(S ${PARITY_RESUME_SCRATCH})
add_test(NAME ckpt.run.save_a_resume_b
         COMMAND sh -c "rm -rf '${S}/ab' && ${P} run ${PARITY_RESUME_SCEN}/fsdp4_tp2.json --steps 5 --save-at 2 --ckpt '${S}/ab' && \
${P} run '${S}/b_hsdp.json' --steps 5 --resume '${S}/ab' 2>&1; echo exit=$?")
set_tests_properties(ckpt.run.save_a_resume_b PROPERTIES
  PASS_REGULAR_EXPRESSION "checkpoint: saved to [^\n]*ab after 2 steps.*verdict: PASS.*checkpoint: resumed from [^\n]*ab at step 2.*\n +2 [^\n]*\n +3 [^\n]*\n +4 .*verdict: PASS.*exit=0\n")

add_test(NAME ckpt.run.seed_w1_to_fsdp8
         COMMAND sh -c "rm -rf '${S}/seed' && ${P} run '${S}/w1.json' --steps 2 --save-at 2 --ckpt '${S}/seed' && \
${P} run ${PARITY_RESUME_SCEN}/fsdp8.json --steps 4 --resume '${S}/seed' 2>&1; echo exit=$?")
set_tests_properties(ckpt.run.seed_w1_to_fsdp8 PROPERTIES
  PASS_REGULAR_EXPRESSION "saved [^\n]*seed after 2 steps.*resumed from [^\n]*seed at step 2.*verdict: PASS.*exit=0\n")

# The same losses after a W = 1 save and resume as without (the printed lines of steps 2 and 3).
add_test(NAME ckpt.run.w1_resume_bitwise
         COMMAND sh -c "set -e; rm -rf '${S}/w1c'; ${P} run '${S}/w1.json' --steps 4 | grep -E '^ +[23] ' > '${S}/w1_full.txt'; \
${P} run '${S}/w1.json' --steps 2 --save-at 2 --ckpt '${S}/w1c' > /dev/null; \
${P} run '${S}/w1.json' --steps 4 --resume '${S}/w1c' | grep -E '^ +[23] ' > '${S}/w1_resumed.txt'; \
test -s '${S}/w1_full.txt' && diff '${S}/w1_full.txt' '${S}/w1_resumed.txt' && echo same-losses")
set_tests_properties(ckpt.run.w1_resume_bitwise PROPERTIES PASS_REGULAR_EXPRESSION "same-losses")

# The check can fire: a resumed state that is not the baseline's (the optimizer's step count
# not restored, the zoo's adam_step_not_restored) fails the verdict, exit 1. A checkpoint of
# another seed's run is not that: it is refused before any rank starts, exit 2, naming the
# field (issue 26; it once loaded and failed the verdict as if the layout were wrong).
add_test(NAME ckpt.run.wrong_state_fails
         COMMAND sh -c "rm -rf '${S}/s2' && ${P} run ${PARITY_RESUME_SCEN}/fsdp4.json --steps 2 --save-at 2 --ckpt '${S}/s2' >/dev/null && \
${P} run ${PARITY_RESUME_SCEN}/fsdp4.json --steps 4 --resume '${S}/s2' --inject adam_step_not_restored 2>&1; echo exit=$?")
set_tests_properties(ckpt.run.wrong_state_fails PROPERTIES
  PASS_REGULAR_EXPRESSION "\nFAIL +[^\n]*\n.*verdict: FAIL.*exit=1\n")
add_test(NAME ckpt.run.refuses.other_seed
         COMMAND sh -c "rm -rf '${S}/s99' && ${P} run '${S}/fsdp4_seed99.json' --steps 2 --save-at 2 --ckpt '${S}/s99' >/dev/null && \
${P} run ${PARITY_RESUME_SCEN}/fsdp4.json --steps 4 --resume '${S}/s99' 2>&1; echo exit=$?")
set_tests_properties(ckpt.run.refuses.other_seed PROPERTIES
  PASS_REGULAR_EXPRESSION "s99/metadata.json: \\$.run.seed: the checkpoint was saved by a run with another seed: checkpoint has 99, this run has 1234.*exit=2\n")

# Faults: one good checkpoint of fsdp4 (4 rank files) after 2 steps, copied and damaged.
set(PARITY_RESUME_GOOD "rm -rf '${S}/good' && ${P} run ${PARITY_RESUME_SCEN}/fsdp4.json --steps 2 --save-at 2 --ckpt '${S}/good' >/dev/null")
set(PARITY_RESUME_RUN "${P} run ${PARITY_RESUME_SCEN}/fsdp4.json --steps 4 --resume")
add_test(NAME ckpt.run.refuses.flipped_byte
         COMMAND sh -c "${PARITY_RESUME_GOOD} && rm -rf '${S}/flip' && cp -r '${S}/good' '${S}/flip' && \
f='${S}/flip/rank1.safetensors' && n=$(stat -c %s $f) && printf 'ZZ' | dd of=$f bs=1 seek=$((n - 100)) conv=notrunc 2>/dev/null && \
${PARITY_RESUME_RUN} '${S}/flip' 2>&1; echo exit=$?")
set_tests_properties(ckpt.run.refuses.flipped_byte PROPERTIES
  PASS_REGULAR_EXPRESSION "rank1\\.safetensors: checksum mismatch in tensor '[^']+'.*exit=[1-9]\n")
add_test(NAME ckpt.run.refuses.truncated_file
         COMMAND sh -c "${PARITY_RESUME_GOOD} && rm -rf '${S}/trunc' && cp -r '${S}/good' '${S}/trunc' && \
truncate -s -64 '${S}/trunc/rank2.safetensors' && ${PARITY_RESUME_RUN} '${S}/trunc' 2>&1; echo exit=$?")
set_tests_properties(ckpt.run.refuses.truncated_file PROPERTIES
  PASS_REGULAR_EXPRESSION "rank2\\.safetensors: truncated: [0-9]+ bytes, metadata\\.json says [0-9]+.*exit=[1-9]\n")
add_test(NAME ckpt.run.refuses.deleted_rank_file
         COMMAND sh -c "${PARITY_RESUME_GOOD} && rm -rf '${S}/del' && cp -r '${S}/good' '${S}/del' && \
rm '${S}/del/rank3.safetensors' && ${PARITY_RESUME_RUN} '${S}/del' 2>&1; echo exit=$?")
set_tests_properties(ckpt.run.refuses.deleted_rank_file PROPERTIES
  PASS_REGULAR_EXPRESSION "rank3\\.safetensors: missing \\(tensor '[^']+' needs it\\).*exit=[1-9]\n")
add_test(NAME ckpt.run.refuses.other_model_config
         COMMAND sh -c "rm -rf '${S}/h64' && ${P} run '${S}/fsdp4_hidden64.json' --steps 2 --save-at 2 --ckpt '${S}/h64' >/dev/null && \
${PARITY_RESUME_RUN} '${S}/h64' 2>&1; echo exit=$?")
set_tests_properties(ckpt.run.refuses.other_model_config PROPERTIES
  PASS_REGULAR_EXPRESSION "metadata\\.json: \\$\\.model/mlp_hidden: the checkpoint was saved for another model config: checkpoint has 64, this run has 32.*exit=[1-9]\n")
# Flags that do not go together are bad input (exit 2) before any rank starts.
add_test(NAME ckpt.run.refuses.save_at_without_ckpt
         COMMAND sh -c "${P} run ${PARITY_RESUME_SCEN}/fsdp4.json --save-at 2 2>&1; echo exit=$?")
set_tests_properties(ckpt.run.refuses.save_at_without_ckpt PROPERTIES
  PASS_REGULAR_EXPRESSION "--ckpt: --save-at K and --ckpt DIR go together[^\n]*\nexit=2\n" FAIL_REGULAR_EXPRESSION "parity launch")

set(PARITY_RESUME_TESTS ckpt.run.save_a_resume_b ckpt.run.seed_w1_to_fsdp8 ckpt.run.w1_resume_bitwise
  ckpt.run.wrong_state_fails ckpt.run.refuses.flipped_byte ckpt.run.refuses.truncated_file
  ckpt.run.refuses.deleted_rank_file ckpt.run.refuses.other_model_config ckpt.run.refuses.save_at_without_ckpt)
set_tests_properties(${PARITY_RESUME_TESTS} PROPERTIES LABELS "ckpt;multiprocess;resume" TIMEOUT 180)
# The fault tests share the good checkpoint's directory: one at a time.
set_tests_properties(ckpt.run.refuses.flipped_byte ckpt.run.refuses.truncated_file ckpt.run.refuses.deleted_rank_file
  PROPERTIES RESOURCE_LOCK parity_resume_good)

# A resume check with --report R.json writes both phases: R.phase1.json (the saving layout,
# first_step 0) and R.json (the resumed layout, first_step = resume.save_at).
add_test(NAME ckpt.run.resume_check_reports_both_phases
         COMMAND sh -c "rm -f '${S}/rr.json' '${S}/rr.phase1.json'; ${P} run ${PARITY_RESUME_SCEN}/resume_fsdp3_to_fsdp4.json --report '${S}/rr.json' > /dev/null; \
echo exit=$?; grep -o '\"first_step\": *[0-9]*' '${S}/rr.phase1.json' '${S}/rr.json'")
set_tests_properties(ckpt.run.resume_check_reports_both_phases PROPERTIES
  PASS_REGULAR_EXPRESSION "exit=0\n[^\n]*rr.phase1.json:\"first_step\": *0\n[^\n]*rr.json:\"first_step\": *[1-9]")
include(${CMAKE_CURRENT_LIST_DIR}/tamper_tests.cmake)  # issue 15: tampered checkpoints refused by every reader
