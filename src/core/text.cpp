#include "core/text.h"

#include <algorithm>
#include <cstdint>
#include <istream>

namespace parity {

namespace {

// The length of the well-formed UTF-8 sequence starting at text[i] that is not a control
// character, or 0 when text[i] must be escaped (a control character, a C1 code point, or a
// byte that does not start a well-formed sequence).
std::size_t printable_unit(std::string_view text, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x20 || c == 0x7f) return 0;
  if (c < 0x80) return 1;
  std::size_t n = 0;
  uint32_t cp = 0, min = 0;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1fu, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0fu, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07u, min = 0x10000;
  else return 0;
  if (i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0u) != 0x80u) return 0;
    cp = (cp << 6) | (b(k) & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;  // overlong, range, surrogate
  if (cp >= 0x80 && cp <= 0x9f) return 0;                                     // C1 controls (CSI = U+009B)
  return n;
}

}  // namespace

std::string json_limits_problem(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    return "larger than " + std::to_string(limits.max_bytes) + " bytes (the limit is " +
           std::to_string(limits.max_bytes) + ")";
  int depth = 0;
  bool in_string = false, escaped = false;
  std::size_t line = 1, column = 0, string_start = 0, string_line = 0, string_column = 0;
  const auto where = [](std::size_t l, std::size_t c) {
    return "line " + std::to_string(l) + ", column " + std::to_string(c);
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    ++column;
    if (c == '\n') line += 1, column = 0;
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      if (in_string && i - string_start > limits.max_string)
        return "a string longer than " + std::to_string(limits.max_string) + " bytes at " +
               where(string_line, string_column) + " (the limit is " + std::to_string(limits.max_string) + ")";
      continue;
    }
    if (c == '"') {
      in_string = true, string_start = i, string_line = line, string_column = column;
    } else if (c == '[' || c == '{') {
      if (++depth > limits.max_depth)
        return "nesting deeper than " + std::to_string(limits.max_depth) + " levels at " + where(line, column) +
               " (the limit is " + std::to_string(limits.max_depth) + ")";
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return "";
}

std::string read_bounded(std::istream& in, std::size_t max_bytes) {
  std::string out;
  char chunk[1 << 16];
  while (in && out.size() <= max_bytes) {
    const std::size_t want = std::min(sizeof chunk, max_bytes + 1 - out.size());
    in.read(chunk, static_cast<std::streamsize>(want));
    out.append(chunk, static_cast<std::size_t>(in.gcount()));
  }
  return out;
}

std::string printable(std::string_view text, std::size_t max_bytes) {
  static const char* const hex = "0123456789abcdef";
  std::string out;
  std::size_t i = 0;
  while (i < text.size() && out.size() < max_bytes) {
    const std::size_t n = printable_unit(text, i);
    if (n > 0) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    const auto c = static_cast<unsigned char>(text[i++]);
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 0xf];
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string printable_lines(std::string_view text) {
  std::string out;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    out += printable(text.substr(start, end - start), text.size());
    if (end == text.size()) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

bool is_printable(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = printable_unit(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace parity
