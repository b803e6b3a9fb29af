# Issue 26 (label fault), through the real binary, one test per case of tests/fault/issue26.sh:
# nothing lost (outputs that are not parity's refused, exit 2), no read of a file that is not
# regular (a FIFO, a device, a directory: refused at once, never a hang), numbers on the
# command line (no clamping, readable bounds, no NaN), SIGHUP / SIGQUIT / SIGPIPE ending a
# launch like SIGTERM; then checkpoint identity (exit 2), a diverged baseline (exit 4) or
# layout (exit 1, root named), exhausted resources (exit 3 naming them, nothing left), stale
# /dev/shm names swept, a stopped rank blamed; then OpenMPI's leftovers swept, the per-host cap
# (exit 2), memory exhaustion (exit 3 naming it), blame under mpi (a stop during MPI_Init
# included). Each fails on the code before it (see the comment of each case).
set(PARITY_ISSUE26_SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/fault/issue26.sh)
foreach(case out_ckpt_foreign_dir out_ckpt_regular_file out_report_foreign out_dir_foreign out_missing_parent
             nonreg_scenario nonreg_golden nonreg_ckpt num_steps num_lr num_empty_name sig_HUP sig_QUIT sig_PIPE
             ident_resume diverge_baseline diverge_layout res_fd res_shm res_fork res_fsize res_tmpdir stale_shm blame_stop
             stale_mpi launch_cap world_cap res_memory blame_stop_mpi blame_stop_mpi_init)
  add_test(NAME fault.issue26.${case}
           COMMAND ${PARITY_ISSUE26_SCRIPT} $<TARGET_FILE:parity> ${PROJECT_SOURCE_DIR}/scenarios ${case})
  set_tests_properties(fault.issue26.${case} PROPERTIES LABELS "fault;input" TIMEOUT 180
    PASS_REGULAR_EXPRESSION "issue26 ${case}: PASS" FAIL_REGULAR_EXPRESSION "issue26 ${case}: FAIL")
endforeach()
# The ones that start ranks hold the machine's cores for a while: one at a time.
set_tests_properties(fault.issue26.out_ckpt_foreign_dir fault.issue26.out_report_foreign fault.issue26.out_dir_foreign
                     fault.issue26.nonreg_ckpt fault.issue26.sig_HUP fault.issue26.sig_QUIT
                     fault.issue26.ident_resume fault.issue26.diverge_baseline fault.issue26.diverge_layout
                     fault.issue26.res_fd fault.issue26.res_shm fault.issue26.res_fsize fault.issue26.res_tmpdir fault.issue26.stale_shm fault.issue26.blame_stop
                     fault.issue26.stale_mpi fault.issue26.launch_cap fault.issue26.res_memory fault.issue26.blame_stop_mpi
                     fault.issue26.blame_stop_mpi_init
                     PROPERTIES LABELS "fault;input;multiprocess" RUN_SERIAL TRUE)
# res_fd, res_shm and res_memory need a private mount namespace (a /dev/shm of its own),
# res_tmpdir a tmpfs it may mount: without one they exit 77, shown as skipped, never as passed.
set_tests_properties(fault.issue26.res_fd fault.issue26.res_shm fault.issue26.res_memory fault.issue26.res_tmpdir
                     PROPERTIES SKIP_RETURN_CODE 77)
