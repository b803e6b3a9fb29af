#include "cli/zoo_report.h"

#include <cstdio>

#include "cli/junit.h"

namespace parity::cli {

namespace {

std::string failure_message(const ZooResult& r) {
  if (r.verdict == "ESCAPED") return r.bug + " escaped: the verdict passed with the bug on";
  if (r.verdict == "ACTS") return r.bug + " acts where the shape table says it cannot (cli/zoo_shape.cpp): " + r.cannot;
  if (r.verdict == "MISNAMED")
    return r.bug + " caught but misnamed: the root named " + (r.named.empty() ? "nothing" : r.named);
  return r.bug + ": the run did not finish (" + r.verdict + ")";
}

}  // namespace

std::string zoo_junit_xml(const std::vector<ZooResult>& results, double wall_seconds, const JunitSuite& suite) {
  std::vector<JunitCase> cases;
  for (const ZooResult& r : results) {
    const bool skipped = r.verdict == "cannot act", failed = r.verdict != "ok" && r.verdict != "no effect" && !skipped;
    cases.push_back({"zoo", r.name.empty() ? r.bug : r.name, r.scenario, r.seconds,
                     skipped ? "cannot act in this shape: " + r.cannot : "", failed, failed ? failure_message(r) : "",
                     "expected: " + r.expected + "\nnamed: " + (r.named.empty() ? "-" : r.named) + "\n" +
                         (r.log.empty() ? "" : "log: " + r.log + "\n")});
  }
  return junit_xml(suite.name.empty() ? JunitSuite{"parity-zoo", "", "", {}} : suite, cases, wall_seconds);
}

}  // namespace parity::cli
