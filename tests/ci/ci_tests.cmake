# The CI integration (issue 30, label ci): the JUnit files CI systems read. Each skips visibly (77) without its tool, never passes.
# ci.junit_schema: `parity matrix --junit` and `parity zoo --junit` against the common JUnit
# schema, written for parity (tests/ci/junit.xsd); the schema must refuse a file= attribute.
add_test(NAME ci.junit_schema
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/junit_schema.sh $<TARGET_FILE:parity> ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CURRENT_LIST_DIR}/junit.xsd)
set_tests_properties(ci.junit_schema PROPERTIES LABELS "ci;multiprocess" TIMEOUT 300 SKIP_RETURN_CODE 77
                     PASS_REGULAR_EXPRESSION "junit schema: ok" FAIL_REGULAR_EXPRESSION "junit schema: FAIL"
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
