// The one JUnit XML writer (`parity matrix --junit`, `parity zoo --junit`): a <testsuites>
// holding one <testsuite> whose counts are read from its cases, valid against the common JUnit
// schema (Jenkins xunit's; tests/ci/junit.xsd, checked by xmllint in ctest). Pure: text in, text out.
#pragma once
#include <string>
#include <string_view>
#include <utility>
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

// What the <testsuite> says of the run as a whole: its name, and where empty nothing else.
struct JunitSuite {
  std::string name;
  std::string timestamp;  // xs:dateTime, UTC without a zone: "2026-11-27T03:10:00"
  std::string hostname;
  std::vector<std::pair<std::string, std::string>> properties;  // <properties>, in this order
};

std::string junit_xml(const JunitSuite& suite, const std::vector<JunitCase>& cases, double wall_seconds);

// Text for XML: & < > " ' escaped; attribute=true also escapes newlines and tabs so they
// survive attribute normalisation; other C0 controls (not expressible in XML 1.0) become '?'.
std::string xml_escape(std::string_view text, bool attribute = false);

}  // namespace parity::cli
