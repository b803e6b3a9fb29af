# issue 16: the side-by-side benchmark (ci/bench/side_by_side, docs/bench.md) in its tiny
# mode: the table is printed and the peer row is a time or says it was skipped. Needs
# python3 (the script's interpreter); the PyTorch peer comes with ci/setup (--no-torch leaves it out).
find_program(PARITY_PYTHON3 python3)
if(PARITY_PYTHON3)
  add_test(NAME bench.side_by_side
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bench/side_by_side_test.sh $<TARGET_FILE:parity>)
  set_tests_properties(bench.side_by_side PROPERTIES LABELS "bench;multiprocess" TIMEOUT 120
    PASS_REGULAR_EXPRESSION "bench side_by_side: PASS" FAIL_REGULAR_EXPRESSION "bench side_by_side: FAIL")
else()
  add_test(NAME bench.side_by_side COMMAND ${CMAKE_COMMAND} -E echo "bench.side_by_side: skipped (no python3)")
  set_tests_properties(bench.side_by_side PROPERTIES LABELS bench SKIP_REGULAR_EXPRESSION "skipped")
endif()

# `parity bench comm`: both ceiling lines and exact rows (tests/bench/bench_comm_test.sh).
add_test(NAME bench.comm COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bench/bench_comm_test.sh $<TARGET_FILE:parity>)
set_tests_properties(bench.comm PROPERTIES LABELS "bench;multiprocess" TIMEOUT 120
  PASS_REGULAR_EXPRESSION "bench comm: PASS" FAIL_REGULAR_EXPRESSION "bench comm: FAIL")
