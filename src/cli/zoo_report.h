// What `parity zoo` knows once a bug's run is done, and the JUnit XML it writes from that
// (--junit): one testcase per bug, a <failure> exactly when the bug escaped, was misnamed or
// its run did not finish; over a scenario set (--set) a pair where the bug cannot act is a skipped
// testcase with the reason. Pure (text in, text out), unit-tested in tests/cli/zoo_report_test.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/junit.h"

namespace parity::cli {

struct ZooResult {
  std::string bug, scenario;
  std::string expected;  // "grad router at step 0, factor containing \"2\""
  std::string named;     // what the verdict's root line named, "" when it named nothing
  std::string verdict;   // "ok", "ESCAPED", "MISNAMED", "ERROR (exit n)"; over a set (--set) also
                         // "cannot act" (a skipped case, with the reason), "no effect" (a cannot-act
                         // pair run under --check-cannot that passed), "ACTS" (one that failed)
  std::string log;       // the run's output file
  double seconds = 0;
  std::string cannot;    // why the bug cannot act in this scenario ("" where it can)
  std::string name;      // the testcase's name: "" the bug's; over a set "bug@scenario"
};

// suite: its time, host and properties (run_context.h); an empty name is "parity-zoo".
std::string zoo_junit_xml(const std::vector<ZooResult>& results, double wall_seconds, const JunitSuite& suite = {});

}  // namespace parity::cli
