// `parity matrix` as the gate calls it, through the binary: an injected bug fails the matrix
// and shows as exactly one JUnit failure and as its root in the summary; --golden fails on an
// edited or missing golden; a bad --inject name is refused before anything runs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/xml_check.h"
#include "harness/golden/golden.h"
#include "common/parity_cmd.h"

namespace parity {
namespace {

using test::parity_cmd;
using test::Result;
using test::slurp;

namespace fs = std::filesystem;

using test::occurrences;

fs::path shipped(const std::string& dir, const std::string& name) {
  return fs::path(PARITY_SOURCE_DIR) / dir / (name + ".json");
}

class MatrixCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("parity_matrix_cli_" + std::string(info->name()) + "_" +
                                        std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "scenarios");
    fs::create_directories(dir_ / "golden");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void copy_scenario(const std::string& name) {
    fs::copy_file(shipped("scenarios", name), dir_ / "scenarios" / (name + ".json"));
  }
  // The matrix over dir_/scenarios with reports into dir_.
  Result matrix(const std::string& extra) {
    return parity_cmd("matrix " + (dir_ / "scenarios").string() + " -j 2 --out " + (dir_ / "logs").string() +
                      " --junit " + (dir_ / "junit.xml").string() + " --summary " + (dir_ / "summary.md").string() +
                      " " + extra);
  }
  fs::path dir_;
};

// dp_averaged_twice halves fsdp4's dense gradients twice; tp2 has no data parallelism, so the
// same bug changes nothing there. One failure, in fsdp4's testcase; without it, none.
TEST_F(MatrixCli, InjectedBugIsOneJunitFailureAndItsRootInTheSummary) {
  copy_scenario("fsdp4");
  copy_scenario("tp2");
  Result r = matrix("--steps 2 --inject dp_averaged_twice");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("matrix verdict: FAIL: 1 passed, 1 failed"), std::string::npos) << r.out;
  std::string x = slurp(dir_ / "junit.xml");
  EXPECT_EQ(test::xml_problem(x), "") << x;
  EXPECT_EQ(occurrences(x, "<failure "), 1) << x;
  // an injected bug is named in front of the failure, so it never reads as a regression
  const size_t fsdp4 = x.find("name=\"fsdp4\""),
               failure = x.find("<failure message=\"(bugs injected on purpose: dp_averaged_twice) "
                                "root grad head x0.25 at step 0");
  ASSERT_NE(fsdp4, std::string::npos) << x;
  EXPECT_GT(failure, fsdp4) << x;
  EXPECT_LT(failure, x.find("</testcase>", fsdp4)) << x;
  const std::string md = slurp(dir_ / "summary.md");
  EXPECT_EQ(md.rfind("# parity matrix: FAIL", 0), 0u) << md;
  EXPECT_NE(md.find("| [fsdp4](logs/fsdp4.log) | 4 | dps 4 | **FAIL** | root grad head x0.25 at step 0 (1/4 (= 1/dp)"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| [tp2](logs/tp2.log) | 2 | tp 2 | PASS |  |"), std::string::npos) << md;

  r = matrix("--steps 2");  // the control: the same matrix without the bug
  EXPECT_EQ(r.code, 0) << r.out;
  x = slurp(dir_ / "junit.xml");
  EXPECT_EQ(test::xml_problem(x), "") << x;
  EXPECT_EQ(x.find("<failure"), std::string::npos) << x;
  EXPECT_EQ(slurp(dir_ / "summary.md").rfind("# parity matrix: PASS", 0), 0u);
}

// tiny (world 1: no run, only its golden check) against its shipped golden, an edited one,
// and none.
TEST_F(MatrixCli, GoldenCatchesAnEditedOrMissingGolden) {
  copy_scenario("tiny");
  fs::copy_file(shipped("golden", "tiny"), dir_ / "golden" / "tiny.json");
  Result r = matrix("--golden");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("golden checks: 1 passed, 0 failed"), std::string::npos) << r.out;

  Golden g = load_golden((dir_ / "golden" / "tiny.json").string());
  g.baseline.loss[3] *= 1 + 1e-7;
  save_golden((dir_ / "golden" / "tiny.json").string(), g);
  r = matrix("--golden");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("matrix verdict: FAIL"), std::string::npos) << r.out;
  std::string x = slurp(dir_ / "junit.xml");
  EXPECT_EQ(test::xml_problem(x), "") << x;
  EXPECT_EQ(occurrences(x, "<failure "), 1) << x;
  EXPECT_NE(x.find("<failure message=\"golden check tiny: FAIL: 1 of"), std::string::npos) << x;
  EXPECT_NE(x.find("  baseline loss" + std::string(22, ' ') + " step   3: got"), std::string::npos) << x;
  EXPECT_NE(slurp(dir_ / "summary.md").find("| [**FAIL**](logs/tiny.golden.log) |"), std::string::npos);

  fs::remove(dir_ / "golden" / "tiny.json");
  r = matrix("--golden");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(slurp(dir_ / "junit.xml").find("no golden file"), std::string::npos);
}

TEST_F(MatrixCli, BadInjectNameExitsTwoWithNothingRun) {
  copy_scenario("tp2");
  const Result r = matrix("--inject dp_averaged_twice,no_such_bug");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown injection 'no_such_bug'"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[1/"), std::string::npos) << "a job started: " << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "logs")) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "junit.xml")) << r.out;
}

}  // namespace
}  // namespace parity
