# Whole runs on the GPU (label gpu; `ctest -L gpu`). Every one exits 77 and shows as
# skipped, never passed, where no CUDA device is visible (parity's exit-code table).
set(PARITY_EXE $<TARGET_FILE:parity>)
set(PARITY_SCN ${PROJECT_SOURCE_DIR}/scenarios)

# The shipped matrix with baseline and every rank on the GPU (host-staged gloo / mpi).
add_test(NAME gpu.matrix COMMAND ${PARITY_EXE} matrix --device cuda ${PARITY_SCN})
set_tests_properties(gpu.matrix PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1800)
# The same in the bf16 policy (docs/precision.md): the kernels compute in fp32, the storage
# points round their outputs as on the CPU.
add_test(NAME gpu.matrix_bf16 COMMAND ${PARITY_EXE} matrix --device cuda --precision bf16 ${PARITY_SCN})
set_tests_properties(gpu.matrix_bf16 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1800)

# Every shipped layout on nccl, W ranks on one GPU where NCCL allows it (>= 2.30) (tests/gpu/nccl_layouts.sh).
add_test(NAME gpu.nccl_layouts COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpu/nccl_layouts.sh ${PARITY_EXE} ${PARITY_SCN})
set_tests_properties(gpu.nccl_layouts PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1800)

# A GPU run is bitwise reproducible: two dumps of the same scenario, file by file.
add_test(NAME gpu.bitwise_rerun COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpu/bitwise_rerun.sh ${PARITY_EXE}
         ${PARITY_SCN}/small.json)
set_tests_properties(gpu.bitwise_rerun PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300)
