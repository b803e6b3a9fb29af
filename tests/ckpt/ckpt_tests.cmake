# Checkpoint tests (issue 7). Included from tests/CMakeLists.txt after the per-directory test
# binaries exist.
#   test_ckpt    in-process: checksum, chunk geometry, every rank of a layout played by one
#                process (save_all / load_rank) across layout pairs, faults, crash recovery;
#                and the multi-process cases, which launch ckpt_worker through proc::launch_main
#   ckpt_worker  the rank process: save / load / resave of the synthetic state
set(PARITY_CKPT_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(ckpt_worker ${PARITY_CKPT_TEST_DIR}/ckpt_worker.cpp)
target_include_directories(ckpt_worker PRIVATE ${PARITY_CKPT_TEST_DIR})
target_link_libraries(ckpt_worker PRIVATE parity_lib)
target_compile_options(ckpt_worker PRIVATE ${PARITY_WARN_FLAGS})

if(TARGET test_ckpt)
  target_include_directories(test_ckpt PRIVATE ${PARITY_CKPT_TEST_DIR})
  target_compile_definitions(test_ckpt PRIVATE PARITY_CKPT_WORKER="$<TARGET_FILE:ckpt_worker>")
  add_dependencies(test_ckpt ckpt_worker)
endif()

# The same worker through the real command: W8 -> W2 -> W8 under `parity launch`.
set(PARITY_CKPT_SCRATCH ${CMAKE_CURRENT_BINARY_DIR}/ckpt-launch)
add_test(NAME ckpt.parity_launch.w8_w2_w8
         COMMAND sh -c "rm -rf '${PARITY_CKPT_SCRATCH}' && mkdir -p '${PARITY_CKPT_SCRATCH}' && \
$<TARGET_FILE:parity> launch -n 8 --timeout 20 -- $<TARGET_FILE:ckpt_worker> save '${PARITY_CKPT_SCRATCH}/a' dpr2.dps2.tp2.ep2.etp2 3 && \
$<TARGET_FILE:parity> launch -n 2 --timeout 20 -- $<TARGET_FILE:ckpt_worker> resave '${PARITY_CKPT_SCRATCH}/a' '${PARITY_CKPT_SCRATCH}/b' dps2 3 && \
$<TARGET_FILE:parity> launch -n 8 --timeout 20 -- $<TARGET_FILE:ckpt_worker> load '${PARITY_CKPT_SCRATCH}/b' dps4.tp2.ep4 3 && \
$<TARGET_FILE:parity> ckpt inspect '${PARITY_CKPT_SCRATCH}/b'")
set_tests_properties(ckpt.parity_launch.w8_w2_w8 PROPERTIES LABELS "unit;ckpt;multiprocess" TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "#wrong 0.*verdict: OK")

# ckpt_tamper: damages a checkpoint in one named way (tamper_tests.cmake, issue 15).
add_executable(ckpt_tamper ${PARITY_CKPT_TEST_DIR}/ckpt_tamper.cpp)
target_link_libraries(ckpt_tamper PRIVATE parity_lib)
target_compile_options(ckpt_tamper PRIVATE ${PARITY_WARN_FLAGS})
