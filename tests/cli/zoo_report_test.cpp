// The zoo's JUnit writer (src/cli/zoo_report.h) on hand-made results: a caught bug is a
// passing testcase, an escaped, misnamed or unfinished one a failure that says what was
// expected and what was named, and the XML stays well-formed whatever the names hold.
#include "cli/zoo_report.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/xml_check.h"

namespace parity::cli {
namespace {

using test::occurrences;

TEST(ZooJunit, OneTestcasePerBugAndAFailureExactlyWhenNotCaughtAndNamed) {
  const std::vector<ZooResult> results = {
      {"router_grad_summed", "tp2.json", "grad router at step 0, factor containing \"2\"", "grad router", "ok", "",
       0.5, "", ""},
      {"sp_layernorm_not_summed", "sp.json", "grad layernorm at step 0", "", "ESCAPED", "/tmp/z/sp.log", 0.7, "", ""},
      {"micro_loss_scaling", "mb2.json", "loss at step 0", "grad head", "MISNAMED", "", 0.2, "", ""},
      {"a<b&\"c\"", "x.json", "loss", "", "ERROR (exit 3)", "", 0.1, "", ""}};
  const std::string x = zoo_junit_xml(results, 1.5);
  EXPECT_EQ(test::xml_problem(x), "") << x;
  EXPECT_NE(x.find("<testsuite name=\"parity-zoo\" tests=\"4\" failures=\"3\""), std::string::npos) << x;
  EXPECT_EQ(occurrences(x, "<testcase "), 4);
  EXPECT_EQ(occurrences(x, "<failure "), 3);
  EXPECT_NE(x.find("name=\"router_grad_summed\" time=\"0.500\"/>"), std::string::npos) << x;
  EXPECT_EQ(x.find(" file="), std::string::npos) << x;  // not in the common schema (tests/ci/junit.xsd)
  EXPECT_NE(x.find(">scenario: sp.json\nexpected: grad layernorm at step 0\n"), std::string::npos) << x;
  EXPECT_NE(x.find("sp_layernorm_not_summed escaped: the verdict passed with the bug on"), std::string::npos) << x;
  EXPECT_NE(x.find("log: /tmp/z/sp.log"), std::string::npos) << x;
  EXPECT_NE(x.find("caught but misnamed: the root named grad head"), std::string::npos) << x;
  EXPECT_NE(x.find("the run did not finish (ERROR (exit 3))"), std::string::npos) << x;
  EXPECT_NE(x.find("a&lt;b&amp;&quot;c&quot;"), std::string::npos) << x;
}

TEST(ZooJunit, AllCaughtIsNoFailure) {
  const std::string x = zoo_junit_xml({{"b", "s.json", "e", "e", "ok", "", 1, "", ""}}, 1);
  EXPECT_EQ(test::xml_problem(x), "");
  EXPECT_NE(x.find("tests=\"1\" failures=\"0\""), std::string::npos) << x;
  EXPECT_EQ(occurrences(x, "<failure"), 0);
}

// Over a scenario set (parity zoo --set): a pair where the bug cannot act is a skipped testcase
// with the reason, never a pass; one run under --check-cannot that changed nothing passes, one
// that acted fails, naming the claim.
TEST(ZooJunit, OverASetCannotActIsSkippedWithTheReasonAndActingIsAFailure) {
  const std::vector<ZooResult> results = {
      {"cp_kv_grad_local", "m.json", "e", "", "cannot act", "", 0, "needs cp >= 2 (here cp 1)", "cp_kv_grad_local@m"},
      {"clip_skips_experts", "m.json", "e", "", "no effect", "", 0.4, "needs clip", "clip_skips_experts@m"},
      {"expert_grads_over_dense_dp", "m.json", "e", "grad routed_experts", "ACTS", "", 0.5, "needs EP from DP",
       "expert_grads_over_dense_dp@m"}};
  const std::string x = zoo_junit_xml(results, 1);
  EXPECT_EQ(test::xml_problem(x), "") << x;
  EXPECT_NE(x.find("tests=\"3\" failures=\"1\""), std::string::npos) << x;
  EXPECT_NE(x.find("skipped=\"1\""), std::string::npos) << x;
  EXPECT_NE(x.find("name=\"cp_kv_grad_local@m\""), std::string::npos) << x;
  EXPECT_NE(x.find("cannot act in this shape: needs cp &gt;= 2 (here cp 1)"), std::string::npos) << x;
  EXPECT_NE(x.find("acts where the shape table says it cannot (cli/zoo_shape.cpp): needs EP from DP"),
            std::string::npos)
      << x;
}

}  // namespace
}  // namespace parity::cli
