#include "cli/junit.h"

#include <cstdio>

namespace parity::cli {

std::string xml_escape(std::string_view text, bool attribute) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += attribute ? "&#10;" : "\n"; break;
      case '\r': out += "&#13;"; break;
      case '\t': out += attribute ? "&#9;" : "\t"; break;
      default:
        // XML 1.0 has no way to write the other C0 controls, not even as references.
        out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
    }
  }
  return out;
}

std::string junit_xml(const JunitSuite& suite, const std::vector<JunitCase>& cases, double wall_seconds) {
  auto secs = [](double s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", s);
    return std::string(buf);
  };
  int failures = 0, skipped = 0;
  std::string x;
  for (const JunitCase& c : cases) {
    // No file= attribute: the common schema (Jenkins xunit's, tests/ci/junit.xsd) has none; the
    // scenario file is the failure text's first line.
    x += "  <testcase classname=\"" + xml_escape(c.classname, true) + "\" name=\"" + xml_escape(c.name, true) +
         "\" time=\"" + secs(c.seconds) + "\"";
    if (!c.failed && c.skipped.empty()) {
      x += "/>\n";
      continue;
    }
    x += ">\n";
    if (!c.skipped.empty()) {
      ++skipped;
      x += "    <skipped message=\"" + xml_escape(c.skipped, true) + "\"/>\n";
    } else {
      ++failures;
      x += "    <failure message=\"" + xml_escape(c.message, true) + "\" type=\"" + xml_escape(c.classname, true) +
           "\">" + xml_escape((c.file.empty() ? "" : "scenario: " + c.file + "\n") + c.body) + "</failure>\n";
    }
    x += "  </testcase>\n";
  }
  std::string head = "<testsuite name=\"" + xml_escape(suite.name, true) + "\" tests=\"" +
                     std::to_string(cases.size()) + "\" failures=\"" + std::to_string(failures) +
                     "\" errors=\"0\" skipped=\"" + std::to_string(skipped) + "\" time=\"" + secs(wall_seconds) + "\"";
  if (!suite.timestamp.empty()) head += " timestamp=\"" + xml_escape(suite.timestamp, true) + "\"";
  if (!suite.hostname.empty()) head += " hostname=\"" + xml_escape(suite.hostname, true) + "\"";
  head += ">\n";
  if (!suite.properties.empty()) {  // the schema's order: properties before the cases
    head += "  <properties>\n";
    for (const auto& [name, value] : suite.properties)
      head += "    <property name=\"" + xml_escape(name, true) + "\" value=\"" + xml_escape(value, true) + "\"/>\n";
    head += "  </properties>\n";
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n" + head + x + "</testsuite>\n</testsuites>\n";
}

}  // namespace parity::cli
