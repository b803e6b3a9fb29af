// Bounded input text (core/text.h): the pre-parse limits and the quoting of untrusted text.
#include "core/text.h"

#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace parity {
namespace {

const JsonLimits kLimits{100, 3, 5};

TEST(JsonLimits, KeepsADocumentWithinThem) {
  EXPECT_EQ(json_limits_problem(R"({"a": [1, {"b": "12345"}]})", kLimits), "");
  EXPECT_EQ(json_limits_problem("", kLimits), "");
  // Brackets and escaped quotes inside strings are text, not structure.
  EXPECT_EQ(json_limits_problem(R"(["[[[[", "\"]]"])", kLimits), "");
}

TEST(JsonLimits, RefusesDepthSizeAndStringsWithWhere) {
  EXPECT_EQ(json_limits_problem("[[[[1]]]]", kLimits),
            "nesting deeper than 3 levels at line 1, column 4 (the limit is 3)");
  EXPECT_EQ(json_limits_problem("{\n \"a\": {\"b\": [{}]}}", kLimits),
            "nesting deeper than 3 levels at line 2, column 14 (the limit is 3)");
  EXPECT_EQ(json_limits_problem(std::string(101, ' '), kLimits), "larger than 100 bytes (the limit is 100)");
  EXPECT_EQ(json_limits_problem(R"({"abcdef": 1})", kLimits),
            "a string longer than 5 bytes at line 1, column 2 (the limit is 5)");
  EXPECT_EQ(json_limits_problem(R"(["12345"])", kLimits), "");  // exactly the limit
  // An unterminated string is still measured (the parser reports it as invalid later).
  EXPECT_NE(json_limits_problem("[\"" + std::string(50, 'x'), kLimits), "");
}

TEST(Printable, EscapesControlsAndBrokenUtf8KeepsTheRest) {
  EXPECT_EQ(printable("plain text / ok"), "plain text / ok");
  EXPECT_EQ(printable("a\x1b[31mred\x07"), "a\\x1b[31mred\\x07");
  EXPECT_EQ(printable("tab\tnew\nline\x7f"), "tab\\x09new\\x0aline\\x7f");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // é, €: kept
  EXPECT_EQ(printable("\xc2\x9b" "2J"), "\\xc2\\x9b2J");                         // C1 CSI: escaped
  EXPECT_EQ(printable("\xff\xc3"), "\\xff\\xc3");                                // not UTF-8
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                                // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");                       // a surrogate
  EXPECT_TRUE(is_printable("caf\xc3\xa9"));
  EXPECT_FALSE(is_printable("a\x1b"));
  EXPECT_FALSE(is_printable("\xc2\x85"));
}

TEST(Printable, CutsLongTextAndSaysHowLong) {
  EXPECT_EQ(printable(std::string(1000000, 'a'), 10), "aaaaaaaaaa... (1000000 bytes)");
  EXPECT_EQ(printable(std::string(10, 'a'), 10), "aaaaaaaaaa");
  EXPECT_EQ(printable_lines("one\x1b\ntwo\n"), "one\\x1b\ntwo\n");
}

TEST(ReadBounded, StopsOneBytePastTheLimit) {
  std::istringstream big(std::string(300000, 'x')), small("abc");
  EXPECT_EQ(read_bounded(big, 100000).size(), 100001u);
  EXPECT_EQ(read_bounded(small, 100000), "abc");
}

}  // namespace
}  // namespace parity
