// The one JUnit XML writer (`parity matrix --junit`, `parity zoo --junit`): a <testsuites>
// holding one <testsuite> whose counts are read from its cases, valid against the common JUnit
// schema (Jenkins xunit's; tests/ci/junit.xsd, checked by xmllint in ctest). Pure: text in, text out.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace parity::cli {

struct JunitCase {
  std::string classname, name;
  std::string file;  // the scenario file: a failure's first line ("scenario: FILE"), no attribute
  double seconds = 0;
  std::string skipped;  // non-empty: the case is skipped, with this message
  bool failed = false;  // a <failure> of type classname with message and body
  std::string message, body;
};

std::string junit_xml(const std::string& suite, const std::vector<JunitCase>& cases, double wall_seconds);

// Text for XML: & < > " ' escaped; attribute=true also escapes newlines and tabs so they
// survive attribute normalisation; other C0 controls (not expressible in XML 1.0) become '?'.
std::string xml_escape(std::string_view text, bool attribute = false);

}  // namespace parity::cli
