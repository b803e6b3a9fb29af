# Golden curves (issue 9): the format and compare as unit tests (test_golden, label unit),
# `parity golden check` through the real binary including failing on perturbed, stale and
# missing goldens (test_golden_cli, label golden), and one golden check per scenario in
# PARITY_GOLDEN_SAMPLE (label golden; `-DPARITY_GOLDEN_ALL=ON` registers every scenario).
# ci/gate checks every golden itself (`parity matrix --golden`: `parity golden check` of every scenario, mpi).
set(PARITY_GOLDEN_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)
foreach(kind golden golden_cli)
  add_executable(test_${kind} ${CMAKE_CURRENT_SOURCE_DIR}/golden/${kind}_test.cpp)
  target_link_libraries(test_${kind} PRIVATE parity_lib GTest::gtest GTest::gtest_main)
  target_compile_options(test_${kind} PRIVATE ${PARITY_WARN_FLAGS})
  target_compile_definitions(test_${kind} PRIVATE
    PARITY_SOURCE_DIR="${PROJECT_SOURCE_DIR}" PARITY_BINARY="$<TARGET_FILE:parity>")
  add_dependencies(test_${kind} parity)
endforeach()
gtest_discover_tests(test_golden PROPERTIES LABELS unit DISCOVERY_TIMEOUT 60)
gtest_discover_tests(test_golden_cli PROPERTIES LABELS "golden" ENVIRONMENT "${PARITY_GOLDEN_ENV}" TIMEOUT 120
                     DISCOVERY_TIMEOUT 60)

option(PARITY_GOLDEN_ALL "Register a golden check for every scenario (default: a sample)" OFF)
set(PARITY_GOLDEN_SAMPLE tiny small fsdp2_tp2_sp_aux hsdp2x2_tp2_ep2_etp2 w8_tp2_ep4 tp2_sigmoid)
file(GLOB PARITY_GOLDEN_SCENARIOS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/scenarios/*.json)
foreach(file ${PARITY_GOLDEN_SCENARIOS})
  get_filename_component(name ${file} NAME_WE)
  if(NOT PARITY_GOLDEN_ALL AND NOT name IN_LIST PARITY_GOLDEN_SAMPLE)
    continue()
  endif()
  add_test(NAME golden.${name} COMMAND parity golden check ${file} --backend mpi)
  set_tests_properties(golden.${name} PROPERTIES LABELS golden TIMEOUT 180 ENVIRONMENT "${PARITY_GOLDEN_ENV}")
endforeach()

# The figures through gnuplot itself: a group of 34 (every pw* and pp* scenario) drawn, gnuplot silent on its script (skipped,
# exit 77, without gnuplot).
add_test(NAME golden.plot_renders COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/golden/plot_renders.sh $<TARGET_FILE:parity>
                                          ${PROJECT_SOURCE_DIR})
set_tests_properties(golden.plot_renders PROPERTIES LABELS "golden;unit" TIMEOUT 120 SKIP_RETURN_CODE 77)
