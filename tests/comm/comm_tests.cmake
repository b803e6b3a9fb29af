# Multi-process comm tests (issue 3). Included from tests/CMakeLists.txt after the
# per-directory test binaries exist.
#   comm_worker  the rank process: collective checks, properties, fault modes
#   comm_launch  a stand-in for `parity launch` (same proc::launch_main)
# test_comm (GoogleTest, in-process) launches comm_worker through launch_main; the ctest
# entries below run it under comm_launch and under a plain mpirun.
set(PARITY_COMM_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(comm_worker ${PARITY_COMM_TEST_DIR}/comm_worker.cpp
               ${PARITY_COMM_TEST_DIR}/comm_checks.cpp ${PARITY_COMM_TEST_DIR}/comm_props.cpp)
target_link_libraries(comm_worker PRIVATE parity_lib rapidcheck)
target_compile_options(comm_worker PRIVATE ${PARITY_WARN_FLAGS})
add_executable(comm_launch ${PARITY_COMM_TEST_DIR}/comm_launch.cpp)
target_link_libraries(comm_launch PRIVATE parity_lib)
target_compile_options(comm_launch PRIVATE ${PARITY_WARN_FLAGS})

if(TARGET test_comm)
  target_compile_definitions(test_comm PRIVATE
    PARITY_COMM_WORKER="$<TARGET_FILE:comm_worker>" PARITY_COMM_LAUNCH="$<TARGET_FILE:comm_launch>"
    PARITY_MPIRUN="${MPIEXEC_EXECUTABLE}")
  target_sources(test_comm PRIVATE ${PARITY_COMM_TEST_DIR}/comm_checks.cpp ${PARITY_COMM_TEST_DIR}/comm_props.cpp)
  add_dependencies(test_comm comm_worker comm_launch)
endif()

set(PARITY_MPI_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)
# The done-when smoke test: 8 ranks through the launcher.
add_test(NAME comm.launch.smoke.gloo.w8
         COMMAND comm_launch -n 8 --timeout-ms 20000 -- $<TARGET_FILE:comm_worker> smoke)
# mpirun directly: the mpi backend, and gloo bootstrapped over MPI (the multi-host path).
add_test(NAME comm.mpirun.mpi.w5
         COMMAND ${MPIEXEC_EXECUTABLE} -np 5 --oversubscribe $<TARGET_FILE:comm_worker> collectives)
add_test(NAME comm.mpirun.gloo_mpi_bootstrap.w4
         COMMAND ${MPIEXEC_EXECUTABLE} -np 4 --oversubscribe -x PARITY_BACKEND=gloo
                 $<TARGET_FILE:comm_worker> collectives)
set_tests_properties(comm.launch.smoke.gloo.w8 comm.mpirun.mpi.w5 comm.mpirun.gloo_mpi_bootstrap.w4
  PROPERTIES LABELS "unit;comm;multiprocess" TIMEOUT 120 ENVIRONMENT "${PARITY_MPI_ENV}")

# The same through the real command, `parity launch` (issue 3's done-when): 8 ranks run a
# collective; a killed rank makes the run fail fast with a message naming it.
add_test(NAME comm.parity_launch.smoke.w8
         COMMAND parity launch -n 8 --timeout 20 -- $<TARGET_FILE:comm_worker> smoke)
add_test(NAME comm.parity_launch.killed_rank_is_named
         COMMAND sh -c "$<TARGET_FILE:parity> launch -n 4 --timeout 3 -- $<TARGET_FILE:comm_worker> kill 2; echo launcher-exit=$?")
set_tests_properties(comm.parity_launch.killed_rank_is_named PROPERTIES
  PASS_REGULAR_EXPRESSION "missing rank 2.*launcher-exit=[1-9]")
set_tests_properties(comm.parity_launch.smoke.w8 comm.parity_launch.killed_rank_is_named
  PROPERTIES LABELS "unit;comm;multiprocess" TIMEOUT 60)

# Gloo allreduces of up to 1 MiB sent per rank take the one-round direct path; the exact
# collectives again with PARITY_GLOO_DIRECT_BYTES=0 keep gloo's own ring allreduce tested at
# a world size the "large" sizes do not reach.
add_test(NAME comm.launch.gloo_ring_allreduce.w5
         COMMAND comm_launch -n 5 --timeout-ms 60000 -- $<TARGET_FILE:comm_worker> collectives)
set_tests_properties(comm.launch.gloo_ring_allreduce.w5 PROPERTIES
  LABELS "unit;comm;multiprocess" TIMEOUT 120 ENVIRONMENT "PARITY_GLOO_DIRECT_BYTES=0;PARITY_GLOO_SHM=0")
