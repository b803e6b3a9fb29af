# Dense layouts checked shard by shard against the baseline (issue 5), each under
# `parity launch` with its world size.
add_executable(parallel_worker ${CMAKE_CURRENT_LIST_DIR}/parallel_worker.cpp)
target_link_libraries(parallel_worker PRIVATE parity_lib)
target_compile_options(parallel_worker PRIVATE ${PARITY_WARN_FLAGS})
