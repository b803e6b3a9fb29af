# Multi-process mesh tests (issue 4): redistribute across real ranks. Included from
# tests/CMakeLists.txt after the per-directory test binaries exist.
#   mesh_worker  the rank process: RapidCheck cases of redistribute, the same on every rank
# test_mesh launches mesh_worker through proc::launch_main (gloo); the ctest entries below run
# it under the real `parity launch` (gloo, 8 ranks) and under a plain mpirun (mpi backend).
set(PARITY_MESH_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(mesh_worker ${PARITY_MESH_TEST_DIR}/mesh_worker.cpp)
target_include_directories(mesh_worker PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(mesh_worker PRIVATE parity_lib rapidcheck)
target_compile_options(mesh_worker PRIVATE ${PARITY_WARN_FLAGS})

if(TARGET test_mesh)
  target_compile_definitions(test_mesh PRIVATE PARITY_MESH_WORKER="$<TARGET_FILE:mesh_worker>"
                             PARITY_MPIRUN="${MPIEXEC_EXECUTABLE}")
  add_dependencies(test_mesh mesh_worker)
endif()
add_dependencies(mesh_worker parity)

add_test(NAME mesh.parity_launch.redistribute.w8
         COMMAND parity launch -n 8 --timeout 30 -- $<TARGET_FILE:mesh_worker> props 20)
add_test(NAME mesh.mpirun.mpi.redistribute.w6
         COMMAND ${MPIEXEC_EXECUTABLE} -np 6 --oversubscribe -x PARITY_BACKEND=mpi
                 $<TARGET_FILE:mesh_worker> props 20)
set_tests_properties(mesh.parity_launch.redistribute.w8 mesh.mpirun.mpi.redistribute.w6 PROPERTIES
  LABELS "unit;mesh;multiprocess" TIMEOUT 120
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
