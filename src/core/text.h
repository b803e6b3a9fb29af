// Bounded input text: the limits every reader of a JSON document applies before parsing it,
// and quoting of untrusted text in messages. A file may hold anything: nesting deep enough to
// overflow the stack of a recursive walk (nlohmann's dump, copy and compare recurse), strings
// long enough to make every message that quotes them quadratic, control characters that a
// terminal would obey. The checks here are linear scans that run before anything else.
#pragma once
#include <cstddef>
#include <iosfwd>
#include <string>
#include <string_view>

namespace parity {

// What a JSON document may be. Every reader names its own (docs/scenario.md, docs/ckpt.md).
struct JsonLimits {
  std::size_t max_bytes;   // the whole document
  int max_depth;           // nesting of arrays and objects; 1 = a flat object
  std::size_t max_string;  // bytes between the quotes of any string or key, escapes as written
};

// The first way `text` breaks `limits`, as a sentence without a trailing period
// ("nesting deeper than 32 levels at line 1, column 33 (the limit is 32)"), or "" when it
// keeps them. A lexical scan (strings and escapes respected, nothing else checked): a document
// that passes can still be invalid JSON, which the parser then reports.
std::string json_limits_problem(std::string_view text, const JsonLimits& limits);

// Reads `in` to its end, but never more than max_bytes + 1 bytes: a longer stream (a huge
// file, /dev/zero) comes back cut at max_bytes + 1, so the caller refuses it unread
// (size() > max_bytes). Check in.bad() for a read error.
std::string read_bounded(std::istream& in, std::size_t max_bytes);

// `text` as it may be printed: printable ASCII and well-formed UTF-8 kept, control characters
// (C0, DEL, C1), and bytes that are not UTF-8 written as \xNN, so a message that quotes a file
// cannot drive the terminal. Longer than `max_bytes`: the head, then "... (N bytes)".
std::string printable(std::string_view text, std::size_t max_bytes = 200);

// printable() line by line, whole: for a message of several lines (an error's what()) printed
// as the last line of defence; newlines are kept, every other control character escaped.
std::string printable_lines(std::string_view text);

// Whether printable(text, any length) would give `text` back unchanged.
bool is_printable(std::string_view text);

}  // namespace parity
