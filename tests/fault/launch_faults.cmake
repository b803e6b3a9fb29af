# Faults injected from outside into real runs (issue 15, label fault): a rank killed (-9)
# under gloo and under mpi, a rank stopped (SIGSTOP: a hang), a command past its --deadline,
# and the launcher itself killed. Each asserts the exit code (3: infrastructure failed), the
# message naming the rank, and an end bound that holds on a loaded machine; the kill is
# repeated (ci/soak repeats kill and stop 30 times each for the worst case).
set(PARITY_FAULT_SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/fault/launch_faults.sh)
foreach(case_tries kill9_gloo:3 stop_gloo:1 kill9_mpi:1 deadline:1 launcher_kill9:1)
  string(REPLACE ":" ";" ct ${case_tries})
  list(GET ct 0 case)
  list(GET ct 1 tries)
  add_test(NAME fault.${case} COMMAND ${PARITY_FAULT_SCRIPT} $<TARGET_FILE:parity> ${PROJECT_SOURCE_DIR}/scenarios ${case} ${tries})
  set_tests_properties(fault.${case} PROPERTIES LABELS "fault;multiprocess" TIMEOUT 120 RUN_SERIAL TRUE
    PASS_REGULAR_EXPRESSION "fault ${case}: PASS" FAIL_REGULAR_EXPRESSION "fault ${case}: FAIL")
endforeach()
# --backend nccl on a machine without a GPU: refused before any rank starts, with the
# "not run here" code (77), which ctest shows as skipped for the scenario tests.
add_test(NAME fault.nccl_without_gpu_not_run
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PROJECT_SOURCE_DIR}/scenarios/tp2.json --backend nccl 2>&1; echo exit=$?")
set_tests_properties(fault.nccl_without_gpu_not_run PROPERTIES LABELS fault
  PASS_REGULAR_EXPRESSION "parity: not run: layout.device cuda \\(backend nccl\\): [^\n]+\nexit=77\n")
