# Fuzzing of the three readers of untrusted bytes (docs/fuzz.md): the scenario reader, the
# checkpoint metadata reader, the safetensors reader. The targets (fuzz_targets.cpp) are
# driven two ways:
#   ordinary build (g++):  test_fuzz, RapidCheck mutating the seed corpora, seeded and
#                          bounded; ctest -L fuzz (a few seconds in all)
#   -DPARITY_FUZZ=ON with CC=clang CXX=clang++ in a build directory of its own: one libFuzzer
#                          binary per target (fuzz_scenario, fuzz_ckpt_metadata,
#                          fuzz_safetensors) with ASan and UBSan, ctest -L libfuzzer (short
#                          seeded runs); ci/fuzz runs them long (ci/soak calls it)
set(PARITY_FUZZ_DIR ${PROJECT_SOURCE_DIR}/tests/fuzz)
set(PARITY_FUZZ_TARGETS scenario ckpt_metadata safetensors)

if(NOT PARITY_FUZZ)
  add_executable(test_fuzz ${PARITY_FUZZ_DIR}/fuzz_props_test.cpp ${PARITY_FUZZ_DIR}/fuzz_targets.cpp)
  target_include_directories(test_fuzz PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(test_fuzz PRIVATE parity_lib GTest::gtest GTest::gtest_main rapidcheck rapidcheck_gtest)
  target_compile_options(test_fuzz PRIVATE ${PARITY_WARN_FLAGS})
  target_compile_definitions(test_fuzz PRIVATE PARITY_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  # Seeded, so a run is the same every time; 1500 cases per property (RC_PARAMS overrides).
  gtest_discover_tests(test_fuzz PROPERTIES LABELS fuzz TIMEOUT 120
    ENVIRONMENT "RC_PARAMS=max_success=1500 seed=1;PARITY_FUZZ_OUT=${CMAKE_CURRENT_BINARY_DIR}"
    DISCOVERY_TIMEOUT 60)
  return()
endif()

# ---- PARITY_FUZZ=ON: libFuzzer (the library is built with -fsanitize=fuzzer-no-link) ----
set(PARITY_FUZZ_RUNS 20000 CACHE STRING "libFuzzer -runs for each target's ctest")
foreach(t ${PARITY_FUZZ_TARGETS})
  add_executable(fuzz_${t} ${PARITY_FUZZ_DIR}/libfuzzer_main.cpp ${PARITY_FUZZ_DIR}/fuzz_targets.cpp)
  target_include_directories(fuzz_${t} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(fuzz_${t} PRIVATE PARITY_FUZZ_TARGET=${t}_reader
                             PARITY_FUZZ_FRAMED=$<STREQUAL:${t},safetensors>)
  target_link_libraries(fuzz_${t} PRIVATE parity_lib)
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  # A short seeded run over the seed corpus (read only: new inputs are not written back).
  set(corpus ${PARITY_FUZZ_DIR}/corpus/${t})
  if(t STREQUAL "scenario")
    list(APPEND corpus ${PROJECT_SOURCE_DIR}/scenarios ${PROJECT_SOURCE_DIR}/scenarios/gpu)
  endif()
  # libFuzzer adds what it finds to its first corpus directory: a fresh one in the build tree.
  set(found ${CMAKE_CURRENT_BINARY_DIR}/libfuzzer-found/${t})
  list(JOIN corpus " " corpus)
  add_test(NAME libfuzzer.${t}
           COMMAND sh -c "rm -rf '${found}' && mkdir -p '${found}' && exec '$<TARGET_FILE:fuzz_${t}>' \
-runs=${PARITY_FUZZ_RUNS} -seed=1 -max_len=4096 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
-dict='${PARITY_FUZZ_DIR}/${t}.dict' '${found}' ${corpus}")
  set_tests_properties(libfuzzer.${t} PROPERTIES LABELS "libfuzzer;fuzz" TIMEOUT 120)
endforeach()
