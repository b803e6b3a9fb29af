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
