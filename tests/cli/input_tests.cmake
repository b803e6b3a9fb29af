# Hostile inputs through the real `parity run` (issue 15, docs/scenario.md "Limits"): one test
# per row of the issue, each writing its file at run time (tests/cli/hostile_inputs.sh) and
# asserting the exit code, the message, a generous time bound ("ended before N s"), that the
# error is printed once by the launcher ("error lines: 1", no rank started: no "time to
# verdict", no "parity: rank"), and that no raw control character reaches the terminal.
set(PARITY_HOSTILE_DIR ${CMAKE_CURRENT_BINARY_DIR}/hostile)
set(PARITY_NO_LAUNCH "time to verdict|parity: rank|parity launch")
function(parity_hostile name pass)
  add_test(NAME input.${name}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/hostile_inputs.sh ${name} $<TARGET_FILE:parity>
                   ${PARITY_HOSTILE_DIR} ${PROJECT_SOURCE_DIR}/scenarios)
  set_tests_properties(input.${name} PROPERTIES LABELS "fault;input" TIMEOUT 120 PASS_REGULAR_EXPRESSION "${pass}"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  if(ARGC GREATER 2)
    set_tests_properties(input.${name} PROPERTIES FAIL_REGULAR_EXPRESSION "${ARGV2}")
  endif()
endfunction()

parity_hostile(deep_nesting
  "input\\.json: refused before parsing: nesting deeper than 32 levels at line 1, column 33 \\(the limit is 32\\)[^\n]*\nexit=2\nended before 10 s\nerror lines: 1\nno raw control characters\n"
  "${PARITY_NO_LAUNCH}")
parity_hostile(long_name
  "input\\.json: refused before parsing: a string longer than 4096 bytes at line 1, column 10 \\(the limit is 4096\\)[^\n]*\nexit=2\nended before 5 s\nerror lines: 1\n"
  "${PARITY_NO_LAUNCH}")
parity_hostile(huge_file
  "input\\.json: scenario file larger than 1048576 bytes, the limit[^\n]*\nexit=2\nended before 5 s\nerror lines: 1\n"
  "${PARITY_NO_LAUNCH}")
parity_hostile(absurd_dim
  "input\\.json: \\$\\.model: sizes beyond any machine: one process would need at least [^\n]* the largest tensor is the attention weight \\(dim x dim\\): 1\\.21e\\+24 elements\nexit=2\nended before 10 s\nerror lines: 1\n"
  "${PARITY_NO_LAUNCH}")
parity_hostile(dim_beyond_machine
  "parity: not run: [^\n]*input\\.json: needs at least [0-9.]+ TiB of memory \\(the launcher's one-device baseline of [0-9.]+ TiB and 2 ranks holding the layout's share: [^\n]*\\), this machine has [0-9.]+ [GT]iB\nexit=77\nended before 10 s\nerror lines: 1\n"
  "${PARITY_NO_LAUNCH}")
parity_hostile(microbatches_beyond_batch
  "input\\.json: \\$\\.model\\.microbatches: must be in \\[1, model\\.batch \\(3\\)\\], got 4: every micro-batch holds at least one whole sequence[^\n]*\nexit=2\nended before 10 s\nerror lines: 1\n"
  "${PARITY_NO_LAUNCH}")
parity_hostile(zero_steps
  "input\\.json: \\$\\.steps: must be >= 1: a run of no step compares nothing, got 0\nexit=2\nended before 10 s\nerror lines: 1\n"
  "${PARITY_NO_LAUNCH}|PASS")
parity_hostile(escape_in_name
  "input\\.json: \\$\\.name: must not contain path separators or control characters, got \"a\\\\x1b\\[31mred\"\nexit=2\nended before 10 s\nerror lines: 1\nno raw control characters\n"
  "${PARITY_NO_LAUNCH}")
parity_hostile(escape_in_key
  "input\\.json: \\$\\.\\\\x1b\\]0.owned\\\\x07: unknown key[^\n]*\nexit=2\nended before 10 s\nerror lines: 1\nno raw control characters\n"
  "${PARITY_NO_LAUNCH}")
parity_hostile(resume_at_last_step
  "--resume: [^\n]*/ckpt was saved after step 1, the run's last step \\(steps = 1\\): nothing would be compared[^\n]*\nexit=2\nended before 10 s\nerror lines: 1\n"
  "${PARITY_NO_LAUNCH}")
parity_hostile(resave_at_last_step
  "verdict: nothing compared: the run starts at step 1, its last \\(steps = 1\\)[^\n]*\n.*exit=0\nended before 10 s\n"
  "verdict: PASS")
# The two that run ranks share the fsdp2 checkpoint's cost only: one at a time is fine.
set_tests_properties(input.resume_at_last_step input.resave_at_last_step PROPERTIES LABELS "fault;input;multiprocess")
