// The matrix's report writers (src/cli/matrix_report.h) on hand-made entries: escaping, a
// JUnit file that is well-formed and has a failure exactly where a run or golden check
// failed, and a summary that names the root of a failure.
#include "cli/matrix_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/xml_check.h"

namespace parity::cli {
namespace {

using test::occurrences;

MatrixEntry entry(const std::string& name, int64_t world, int run_rc, int golden_rc = -1) {
  MatrixEntry e;
  e.name = name, e.file = "scenarios/" + name + ".json", e.world = world, e.layout = "dps 4";
  if (world > 1) e.run = {run_rc, 1.25, "/tmp/m/" + name + ".log", ""};
  if (golden_rc >= 0) e.golden = {golden_rc, 2.5, "/tmp/m/" + name + ".golden.log", ""};
  return e;
}

// A failed fsdp4 whose report names its root, with text that needs escaping.
MatrixEntry failed_fsdp4() {
  MatrixEntry e = entry("fsdp4", 4, 1, 0);
  e.run.detail = "root: grad head at step 0, x0.25 <1/dp> & more\nverdict: FAIL \"3 rows\"\n";
  e.report = {{"rows", {{{"norm_rel", 0.75}, {"tol", 1e-11}}, {{"norm_rel", 1e-13}, {"tol", 1e-11}}}},
              {"root",
               {{"quantity", "grad"}, {"subject", "head"}, {"scale_ratio", 0.25}, {"step", 0},
                {"factor", "1/4 (= 1/dp): the dense gradients"}, {"same_step", {1, 2}}, {"consequences", {1}}}}};
  return e;
}

TEST(MatrixReport, XmlEscapeCoversMarkupQuotesAndControls) {
  EXPECT_EQ(xml_escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  EXPECT_EQ(xml_escape("x\ny\tz"), "x\ny\tz");
  EXPECT_EQ(xml_escape("x\ny\tz", /*attribute=*/true), "x&#10;y&#9;z");
  EXPECT_EQ(xml_escape(std::string("bell\x07 esc\x1b", 10)), "bell? esc?");
  EXPECT_EQ(xml_escape("&amp;"), "&amp;amp;");  // text, not markup: escaped again
}

TEST(MatrixReport, JunitIsWellFormedWithAFailureExactlyWhereOneFailed) {
  std::vector<MatrixEntry> es{entry("tp2", 2, 0, 0), failed_fsdp4(), entry("tiny", 1, -1, 1)};
  es[2].golden.detail = "golden check tiny: FAIL: 1 of 1200 values differ\n  baseline loss step 3: got 1, golden 2\n";
  const std::string x = junit_xml(es, 12.5);
  EXPECT_EQ(test::xml_problem(x), "") << x;
  EXPECT_EQ(occurrences(x, "<testcase "), 6) << x;  // 3 runs (one skipped) and 3 golden checks
  EXPECT_EQ(occurrences(x, "<failure "), 2) << x;
  EXPECT_NE(x.find("tests=\"6\" failures=\"2\" errors=\"0\" skipped=\"1\""), std::string::npos) << x;
  // The run's failure: its root as the message, its lines (escaped) as the text.
  const size_t fsdp4 = x.find("classname=\"verdict\" name=\"fsdp4\"");
  ASSERT_NE(fsdp4, std::string::npos) << x;
  const size_t failure = x.find("<failure message=\"root grad head x0.25 at step 0 (1/4 (= 1/dp)) + 2 more at that "
                                "step, 1 consequences\"", fsdp4);
  EXPECT_NE(failure, std::string::npos) << x;
  EXPECT_LT(failure, x.find("</testcase>", fsdp4));
  EXPECT_NE(x.find("x0.25 &lt;1/dp&gt; &amp; more"), std::string::npos) << x;
  // The golden check's failure: its FAIL line as the message, the differing values below.
  EXPECT_NE(x.find("<failure message=\"golden check tiny: FAIL: 1 of 1200 values differ\" type=\"golden\">"),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("baseline loss step 3"), std::string::npos) << x;
  // Passing ones carry no failure, the world-1 run is skipped.
  EXPECT_NE(x.find("classname=\"verdict\" name=\"tp2\" time=\"1.250\"/>"), std::string::npos) << x;
  // The common JUnit schema has no file= on a testcase (tests/ci/junit.xsd): the scenario is
  // the failure text's first line.
  EXPECT_EQ(x.find(" file="), std::string::npos) << x;
  EXPECT_NE(x.find("type=\"verdict\">scenario: scenarios/fsdp4.json\n"), std::string::npos) << x;
  EXPECT_NE(x.find("<skipped message=\"world 1: no layout to compare\"/>"), std::string::npos) << x;
}

TEST(MatrixReport, JunitOfAPassingMatrixHasNoFailure) {
  const std::string x = junit_xml({entry("tp2", 2, 0, 0), entry("fsdp4", 4, 0, 0)}, 3);
  EXPECT_EQ(test::xml_problem(x), "") << x;
  EXPECT_EQ(x.find("<failure"), std::string::npos) << x;
}

TEST(MatrixReport, XmlCheckRejectsWhatItShould) {  // the check above can fail
  EXPECT_NE(test::xml_problem("<a><b></a></b>"), "");
  EXPECT_NE(test::xml_problem("<a x=\"1 < 2\"/>"), "");
  EXPECT_NE(test::xml_problem("<a>fish & chips</a>"), "");
  EXPECT_NE(test::xml_problem("<a/><b/>"), "");
  EXPECT_EQ(test::xml_problem("<?xml version=\"1.0\"?>\n<a x=\"&#10;\">&lt;<b/></a>\n"), "");
}

TEST(MatrixReport, SummaryNamesTheRootNotTheRows) {
  std::vector<MatrixEntry> es{entry("tp2", 2, 0, 0), failed_fsdp4(), entry("tiny", 1, -1, 0)};
  SummaryInfo info;
  info.title = "ci/gate: ctest PASS", info.commit = "0123456789abcdef0123", info.date = "2025-01-01 00:00 UTC";
  info.logs_link = "logs", info.golden = true, info.wall_seconds = 9.5;
  info.plots = {{"fsdp", "plots/fsdp"}};
  const std::string md = summary_markdown(es, info);
  EXPECT_EQ(md.rfind("# parity matrix: FAIL\n\nci/gate: ctest PASS\n\ncommit `0123456789ab`, 2025-01-01", 0), 0u)
      << md;
  EXPECT_NE(md.find("3 scenarios: 1 layouts passed, 1 failed, 1 skipped"), std::string::npos) << md;
  EXPECT_NE(md.find("**Failed layouts:** fsdp4\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| [fsdp4](logs/fsdp4.log) | 4 | dps 4 | **FAIL** | root grad head x0.25 at step 0 (1/4 (= "
                    "1/dp)) + 2 more at that step, 1 consequences | 7.5e+10 | [PASS](logs/fsdp4.golden.log) "
                    "| 3.8 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| tiny | 1 | dps 4 | skipped |  | - | [PASS](logs/tiny.golden.log) | 2.5 |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("![fsdp](plots/fsdp.png)"), std::string::npos) << md;
}

// A run measured again (docs/verdict.md "Measured again") says so in the root column, passed or failed.
TEST(MatrixReport, ARunMeasuredAgainSaysSo) {
  MatrixEntry passed = entry("tp2", 2, 0);
  passed.report = {{"rows", nlohmann::json::array()}, {"root", nullptr}, {"remeasured", "the first measurement ..."}};
  EXPECT_EQ(summarize_report(passed.report).root, "measured again (the first twins failed it at rounding level)");
  passed.report["remeasured"] = "";
  EXPECT_EQ(summarize_report(passed.report).root, "");
  MatrixEntry failed = failed_fsdp4();
  failed.report["remeasured"] = "the first measurement ...";
  const std::string root = summarize_report(failed.report).root;
  EXPECT_EQ(root.rfind("root grad head x0.25 at step 0", 0), 0u) << root;
  EXPECT_NE(root.find("; measured again (the first twins"), std::string::npos) << root;
}

// --summary-links none, for a CI step summary ($GITHUB_STEP_SUMMARY), where neither the logs
// nor the plots are: the verdict first, the same rows and paths, no link and no image.
TEST(MatrixReport, StepSummaryOpensWithTheVerdictAndHasNoLinks) {
  std::vector<MatrixEntry> es{entry("tp2", 2, 0, 0), failed_fsdp4(), entry("tiny", 1, -1, 0)};
  SummaryInfo info;
  info.commit = "0123456789abcdef0123-dirty", info.logs_link = "logs/matrix", info.golden = true;
  info.plots = {{"fsdp", "plots/fsdp"}};
  info.links = false;
  const std::string md = summary_markdown(es, info);
  EXPECT_EQ(md.rfind("# parity matrix: FAIL\n\ncommit `0123456789ab-dirty`, ", 0), 0u) << md;
  EXPECT_EQ(md.find("]("), std::string::npos) << md;  // no link, no image
  EXPECT_EQ(md.find("!["), std::string::npos) << md;
  EXPECT_NE(md.find("Logs: `logs/matrix/` beside the summary file (NAME.log"), std::string::npos) << md;
  EXPECT_NE(md.find("| fsdp4 | 4 | dps 4 | **FAIL** | root grad head x0.25 at step 0"), std::string::npos) << md;
  EXPECT_NE(md.find("| tiny | 1 | dps 4 | skipped |  | - | PASS | 2.5 |"), std::string::npos) << md;
  EXPECT_NE(md.find("- **fsdp**: `plots/fsdp.png`, `plots/fsdp.svg`"), std::string::npos) << md;
  info.links = true;  // the control: the same summary read beside its files links them
  EXPECT_NE(summary_markdown(es, info).find("]("), std::string::npos);
}

// The suite says when, where and what ran (timestamp, hostname, properties in the schema's
// place), and an injected bug marks every failure, so a planted FAIL never reads as a regression.
TEST(MatrixReport, JunitSuiteCarriesItsRunAndMarksInjectedFailures) {
  std::vector<MatrixEntry> es{entry("tp2", 2, 0), failed_fsdp4()};
  JunitSuite suite{"parity-matrix", "2026-11-27T03:10:00", "box<1>", {{"commit", "abc"}, {"injected", "tp_sum_again"}}};
  const std::string x = junit_xml(es, 3, suite, "bugs injected on purpose: tp_sum_again");
  EXPECT_EQ(test::xml_problem(x), "") << x;
  EXPECT_NE(x.find("time=\"3.000\" timestamp=\"2026-11-27T03:10:00\" hostname=\"box&lt;1&gt;\">\n  <properties>\n"
                   "    <property name=\"commit\" value=\"abc\"/>\n"
                   "    <property name=\"injected\" value=\"tp_sum_again\"/>\n  </properties>\n  <testcase "),
            std::string::npos)
      << x;
  EXPECT_NE(x.find("<failure message=\"(bugs injected on purpose: tp_sum_again) root grad head"), std::string::npos)
      << x;
  // the control: the same entries with nothing injected have an unmarked message and no properties
  const std::string plain = junit_xml(es, 3);
  EXPECT_NE(plain.find("<failure message=\"root grad head"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("<properties>"), std::string::npos) << plain;
  EXPECT_NE(plain.find("<testsuite name=\"parity-matrix\""), std::string::npos) << plain;
}

TEST(MatrixReport, SummaryMarksInjectionsShowsFailuresAndCollapsesTheRest) {
  std::vector<MatrixEntry> es{entry("tp2", 2, 0), failed_fsdp4(), entry("tiny", 1, -1)};
  SummaryInfo info;
  info.on_purpose = "bugs injected on purpose: tp_sum_again";
  const std::string md = summary_markdown(es, info);
  EXPECT_EQ(md.rfind("# parity matrix: FAIL (injected on purpose)\n\n**bugs injected on purpose: tp_sum_again**", 0),
            0u)
      << md;
  const size_t failed = md.find("| fsdp4 |"), details = md.find("<details><summary>2 other scenarios");
  ASSERT_NE(failed, std::string::npos) << md;
  ASSERT_NE(details, std::string::npos) << md;
  EXPECT_LT(failed, details) << md;  // the failure is shown, not folded away
  EXPECT_GT(md.find("| tp2 |"), details) << md;
  EXPECT_LT(md.find("| tp2 |"), md.find("</details>")) << md;
  // everything passing: one folded table, no heading mark
  const std::string pass = summary_markdown({entry("tp2", 2, 0)}, {});
  EXPECT_NE(pass.find("<details><summary>1 scenarios (passed or skipped)"), std::string::npos) << pass;
  EXPECT_EQ(pass.find("injected"), std::string::npos) << pass;
}

// Without --out the logs are in a temporary directory: the summary gives its absolute path and
// says so, and links nothing into it.
TEST(MatrixReport, SummaryTellsTheTruthAboutTemporaryLogs) {
  std::vector<MatrixEntry> es{failed_fsdp4()};
  SummaryInfo info;
  info.logs_link = "/tmp/parity-matrix-x", info.logs_temporary = true;
  const std::string md = summary_markdown(es, info);
  EXPECT_NE(md.find("Logs: `/tmp/parity-matrix-x/`, a temporary directory on the machine that ran the matrix"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("beside the summary file"), std::string::npos) << md;
  EXPECT_EQ(md.find("]("), std::string::npos) << md;
}

TEST(MatrixReport, SummaryCellsCannotBreakTheTable) {
  MatrixEntry e = entry("a|b", 2, 0);
  e.layout = "x|y\nz";
  const std::string md = summary_markdown({e}, {});
  EXPECT_NE(md.find("| a\\|b | 2 | x\\|y z | PASS |"), std::string::npos) << md;
  EXPECT_EQ(md.rfind("# parity matrix: PASS", 0), 0u) << md;
}

TEST(MatrixReport, FailureLinesKeepTheRootAndTheDifferingValues) {
  const std::string run = "step 0 ...\nFAIL     grad head 0.75\nPASS     loss\nroot: grad head at step 0\n"
                          "verdict: FAIL\n";
  EXPECT_EQ(failure_lines(run, false), "FAIL     grad head 0.75\nroot: grad head at step 0\nverdict: FAIL\n");
  // Many failing rows: the root and the verdict are kept past the cap.
  EXPECT_EQ(failure_lines("FAIL a\nFAIL b\nFAIL c\nroot: a\nverdict: FAIL\n", false, 1),
            "FAIL a\nroot: a\nverdict: FAIL\n");
  const std::string golden = "golden check tiny: FAIL: 2 of 9 values differ\n  baseline loss step 3: got 1\n"
                             "  (regenerate it with: parity golden update x)\nnoise\n";
  EXPECT_EQ(failure_lines(golden, true, 2),
            "golden check tiny: FAIL: 2 of 9 values differ\n  baseline loss step 3: got 1\n");
}

TEST(MatrixReport, PlotGroupsAreNameFamilies) {
  EXPECT_EQ(plot_group("fsdp2_tp2_sp"), "fsdp");
  EXPECT_EQ(plot_group("hsdp2x2_tp2"), "hsdp");
  EXPECT_EQ(plot_group("tp4"), "tp");
  EXPECT_EQ(plot_group("ep_topk1"), "ep");
  EXPECT_EQ(plot_group("w8_tp2_ep4"), "world_ep");
  EXPECT_EQ(plot_group("resume_fsdp3_to_fsdp4"), "resume");
  EXPECT_EQ(plot_group("tiny"), "one_device");
  EXPECT_EQ(plot_group("small"), "one_device");
}

}  // namespace
}  // namespace parity::cli
