# Dense layouts checked shard by shard against the baseline (issue 5), each under
# `parity launch` with its world size.
add_executable(parallel_worker ${CMAKE_CURRENT_LIST_DIR}/parallel_worker.cpp)
target_link_libraries(parallel_worker PRIVATE parity_lib)
target_compile_options(parallel_worker PRIVATE ${PARITY_WARN_FLAGS})
# layout.dp_sharding (docs/parallel.md): every rank's gradient and parameter checked against
# their layouts' element counts (a zero2 gradient is a shard, a ddp / zero1 one whole) and
# values, with the baseline side by side
foreach(s ddp4 zero2_dp4_ep2)
  add_test(NAME parallel.dp_sharding.${s} COMMAND parity launch -n 4 -- $<TARGET_FILE:parallel_worker>
           ${PROJECT_SOURCE_DIR}/scenarios/${s}.json 3)
  set_tests_properties(parallel.dp_sharding.${s} PROPERTIES LABELS "parallel;w4" TIMEOUT 120)
endforeach()

# Activation recompute (issue 28, part 3): recompute_worker runs a layout under every
# layout.recompute mode and compares the bytes; test_parallel launches it (gloo), and the
# entry below runs it under mpirun (mpi backend).
add_executable(recompute_worker ${CMAKE_CURRENT_LIST_DIR}/recompute_worker.cpp)
target_link_libraries(recompute_worker PRIVATE parity_lib)
target_compile_options(recompute_worker PRIVATE ${PARITY_WARN_FLAGS})
if(TARGET test_parallel)
  target_compile_definitions(test_parallel PRIVATE PARITY_RECOMPUTE_WORKER="$<TARGET_FILE:recompute_worker>"
                             PARITY_MPIRUN="${MPIEXEC_EXECUTABLE}")
  add_dependencies(test_parallel recompute_worker)
endif()
add_test(NAME parallel.mpirun.mpi.recompute.w4_tp2_sp_ep4
         COMMAND ${MPIEXEC_EXECUTABLE} -np 4 --oversubscribe -x PARITY_BACKEND=mpi
                 $<TARGET_FILE:recompute_worker> ${PROJECT_SOURCE_DIR}/scenarios/w4_tp2_sp_ep4_uneven_b3_mb2.json 2)
set_tests_properties(parallel.mpirun.mpi.recompute.w4_tp2_sp_ep4 PROPERTIES
  LABELS "unit;parallel;multiprocess" TIMEOUT 300 PASS_REGULAR_EXPRESSION "recompute: OK"
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
