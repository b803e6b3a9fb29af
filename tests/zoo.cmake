# The bug zoo (core/inject.h, docs/zoo.md): each named bug, turned on in the real parallel
# code path, must fail the scenario that should catch it, and the verdict's root line must
# name the quantity, step and factor the registry expects (`parity zoo NAME`). Label zoo.
execute_process(COMMAND sed -n "s/^      {\"\\([a-z_]*\\)\", \"[a-z]*\\/.*/\\1/p" ${PROJECT_SOURCE_DIR}/src/core/inject.cpp
                OUTPUT_VARIABLE PARITY_ZOO_NAMES OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REPLACE "\n" ";" PARITY_ZOO_NAMES "${PARITY_ZOO_NAMES}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/core/inject.cpp)
foreach(name ${PARITY_ZOO_NAMES})
  add_test(NAME zoo.${name} COMMAND $<TARGET_FILE:parity> zoo ${name} --scenarios ${PROJECT_SOURCE_DIR}/scenarios)
  set_tests_properties(zoo.${name} PROPERTIES LABELS zoo)
endforeach()
list(LENGTH PARITY_ZOO_NAMES PARITY_ZOO_COUNT)
if(PARITY_ZOO_COUNT LESS 10)
  message(FATAL_ERROR "tests/zoo.cmake: found ${PARITY_ZOO_COUNT} injections in src/core/inject.cpp, expected >= 10")
endif()
add_test(NAME zoo.unknown_name_is_bad_input
         COMMAND sh -c "$<TARGET_FILE:parity> run ${PROJECT_SOURCE_DIR}/scenarios/tp2.json --inject no_such_bug 2>&1; echo exit=$?")
set_tests_properties(zoo.unknown_name_is_bad_input PROPERTIES LABELS zoo PASS_REGULAR_EXPRESSION
  "unknown injection 'no_such_bug' \\(known: norm_counts_replicas, [^\n]*\n.*exit=2\n")
# A bug that escapes fails `parity zoo`: dp_averaged_twice in a layout without data
# parallelism (tp2, named fsdp4.json in a scratch directory) changes nothing.
add_test(NAME zoo.an_escaped_bug_fails_the_zoo
         COMMAND sh -c "d=$(mktemp -d) && cp ${PROJECT_SOURCE_DIR}/scenarios/tp2.json $d/fsdp4.json && $<TARGET_FILE:parity> zoo dp_averaged_twice --scenarios $d; echo exit=$?; rm -rf $d")
set_tests_properties(zoo.an_escaped_bug_fails_the_zoo PROPERTIES LABELS zoo
  PASS_REGULAR_EXPRESSION "dp_averaged_twice +fsdp4.json +ESCAPED .*zoo verdict: FAIL: 1 bugs, 0 caught.*exit=1\n")
