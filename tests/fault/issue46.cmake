# Issue 46 item 4 (C++ side), through the real binary, one test per case of tests/fault/issue46.sh:
# `parity compare` refuses manifest paths out of the dump, links and the reference's own file,
# a same-size dtype, damaged files (exit 2, not 3), a non-finite reference (exit 4, not 1), a
# forged noise, FIFOs and a 100 GiB sparse file. Each case but the controls (nan_candidate,
# map_fifo) failed on main 7df2e7e: `tests/fault/issue46.sh OLD_PARITY scenarios CASE`.
set(PARITY_ISSUE46_CASES path_dotdot path_absolute path_symlink path_hardlink dtype_swap damaged_header
    nan_reference nan_candidate noise_forged map_fifo sparse_file manifest_entries)
foreach(case ${PARITY_ISSUE46_CASES})
  add_test(NAME fault.issue46.${case}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/fault/issue46.sh $<TARGET_FILE:parity> ${PROJECT_SOURCE_DIR}/scenarios
                   ${case})
  set_tests_properties(fault.issue46.${case} PROPERTIES LABELS "fault;input" TIMEOUT 120 SKIP_RETURN_CODE 77
    PASS_REGULAR_EXPRESSION "issue46 ${case}: PASS" FAIL_REGULAR_EXPRESSION "issue46 ${case}: FAIL")
endforeach()
