#include "cli/zoo_report.h"

#include <cstdio>

#include "cli/matrix_report.h"

namespace parity::cli {

namespace {

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

std::string failure_message(const ZooResult& r) {
  if (r.verdict == "ESCAPED") return r.bug + " escaped: the verdict passed with the bug on";
  if (r.verdict == "MISNAMED") return r.bug + " caught but misnamed: the root named " + (r.named.empty() ? "nothing" : r.named);
  return r.bug + ": the run did not finish (" + r.verdict + ")";
}

}  // namespace

std::string zoo_junit_xml(const std::vector<ZooResult>& results, double wall_seconds) {
  int failures = 0;
  std::string cases;
  for (const ZooResult& r : results) {
    cases += "  <testcase classname=\"zoo\" name=\"" + xml_escape(r.bug, true) + "\" file=\"" +
             xml_escape(r.scenario, true) + "\" time=\"" + seconds_str(r.seconds) + "\"";
    if (r.verdict == "ok") {
      cases += "/>\n";
      continue;
    }
    ++failures;
    cases += ">\n    <failure message=\"" + xml_escape(failure_message(r), true) + "\" type=\"zoo\">" +
             xml_escape("expected: " + r.expected + "\nnamed: " + (r.named.empty() ? "-" : r.named) + "\n" +
                        (r.log.empty() ? "" : "log: " + r.log + "\n")) +
             "</failure>\n  </testcase>\n";
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n<testsuite name=\"parity-zoo\" tests=\"" +
         std::to_string(results.size()) + "\" failures=\"" + std::to_string(failures) +
         "\" errors=\"0\" skipped=\"0\" time=\"" + seconds_str(wall_seconds) + "\">\n" + cases + "</testsuite>\n" +
         "</testsuites>\n";
}

}  // namespace parity::cli
