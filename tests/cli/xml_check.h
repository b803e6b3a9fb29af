// A small XML well-formedness check for the tests of the JUnit writer (no XML library is a
// dependency): one root element, every tag closed in order, attribute values quoted, '&'
// only in the five predefined entities or a character reference, no raw '<' in text or
// values. Returns "" when well-formed, else what is wrong and where.
#pragma once
#include <cctype>
#include <string>
#include <vector>

namespace parity::test {

// How many times `what` occurs in `s` (overlaps counted).
inline int occurrences(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

inline std::string xml_problem(const std::string& x) {
  std::vector<std::string> open;
  int roots = 0;
  auto where = [&](size_t i) { return " at offset " + std::to_string(i); };
  auto entity_ok = [&](size_t i) {  // x[i] == '&'
    const size_t semi = x.find(';', i);
    if (semi == std::string::npos || semi - i > 8) return false;
    const std::string e = x.substr(i + 1, semi - i - 1);
    if (e == "amp" || e == "lt" || e == "gt" || e == "quot" || e == "apos") return true;
    if (e.size() < 2 || e[0] != '#') return false;
    for (size_t k = 1; k < e.size(); ++k)
      if (!std::isdigit(static_cast<unsigned char>(e[k]))) return false;
    return true;
  };
  size_t i = 0;
  if (x.rfind("<?xml", 0) == 0) i = x.find("?>") + 2;
  while (i < x.size()) {
    if (x[i] == '&' && !entity_ok(i)) return "bad '&'" + where(i);
    if (x[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(x[i]))) return "text outside the root" + where(i);
      ++i;
      continue;
    }
    const bool closing = i + 1 < x.size() && x[i + 1] == '/';
    size_t j = i + (closing ? 2 : 1);
    std::string name;
    while (j < x.size() && (std::isalnum(static_cast<unsigned char>(x[j])) || x[j] == '_' || x[j] == '-'))
      name += x[j++];
    if (name.empty()) return "a tag without a name" + where(i);
    bool self_closing = false;
    for (;;) {  // attributes up to '>' or '/>'
      while (j < x.size() && std::isspace(static_cast<unsigned char>(x[j]))) ++j;
      if (j >= x.size()) return "unterminated tag <" + name + where(i);
      if (x[j] == '>') break;
      if (x[j] == '/' && j + 1 < x.size() && x[j + 1] == '>') {
        self_closing = true, ++j;
        break;
      }
      if (closing) return "attributes in a closing tag" + where(j);
      size_t k = j;
      while (k < x.size() && (std::isalnum(static_cast<unsigned char>(x[k])) || x[k] == '_' || x[k] == '-')) ++k;
      if (k == j || k + 1 >= x.size() || x[k] != '=' || x[k + 1] != '"') return "bad attribute" + where(j);
      const size_t end = x.find('"', k + 2);
      if (end == std::string::npos) return "unterminated attribute value" + where(k);
      for (size_t v = k + 2; v < end; ++v) {
        if (x[v] == '<') return "'<' in an attribute value" + where(v);
        if (x[v] == '&' && !entity_ok(v)) return "bad '&' in an attribute value" + where(v);
      }
      j = end + 1;
    }
    if (closing) {
      if (open.empty() || open.back() != name) return "</" + name + "> closes nothing open" + where(i);
      open.pop_back();
    } else if (!self_closing) {
      if (open.empty()) ++roots;
      open.push_back(name);
    } else if (open.empty()) {
      ++roots;
    }
    i = j + 1;
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  return roots == 1 ? "" : std::to_string(roots) + " root elements";
}

}  // namespace parity::test
