# Issue 42 (label fault), through the real binary, one test per case of tests/fault/issue42.sh:
# the output side (nothing a user owns overwritten, no fixed temporary name or followed link, a
# user's files kept in a checkpoint saved over, one writer per directory, bounded reads in
# plot, a diverging dump exits 4) and the newest keys' bounds and messages. Each fails on the
# code before it (see the comment of each case).
set(PARITY_ISSUE42_SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/fault/issue42.sh)
set(PARITY_ISSUE42_CASES out_export out_links tmp_export tmp_dump tmp_golden ckpt_keep lock_ckpt lock_dump
    plot_nonreg plot_outputs read_compare dump_diverge key_pp_virtual key_interleaved_pp1 key_pp_layers_empty
    key_precision_empty key_steps msg_dump_loop msg_golden_type msg_matrix_tmp)
foreach(case ${PARITY_ISSUE42_CASES})
  add_test(NAME fault.issue42.${case}
           COMMAND ${PARITY_ISSUE42_SCRIPT} $<TARGET_FILE:parity> ${PROJECT_SOURCE_DIR}/scenarios ${case})
  set_tests_properties(fault.issue42.${case} PROPERTIES LABELS "fault;input" TIMEOUT 180 SKIP_RETURN_CODE 77
    PASS_REGULAR_EXPRESSION "issue42 ${case}: PASS" FAIL_REGULAR_EXPRESSION "issue42 ${case}: FAIL")
endforeach()
# The ones that start several ranks at once: one at a time.
set_tests_properties(fault.issue42.lock_ckpt fault.issue42.ckpt_keep fault.issue42.msg_matrix_tmp
                     PROPERTIES LABELS "fault;input;multiprocess" RUN_SERIAL TRUE)
