// `parity zoo -j N` through the binary: the runs go N at a time (cli/jobs.h), yet the table,
// the verdict line, the JUnit and the files kept are those of one at a time, the rows in the
// order the bugs are named even when the first one ends last.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include "common/parity_cmd.h"

namespace parity {
namespace {

using test::parity_cmd;
using test::Result;
using test::slurp;

namespace fs = std::filesystem;

// Times out: a row's "0.57s", the JUnit's time="0.571" and its timestamp.
std::string untimed(const std::string& s) {
  const std::string timed = std::regex_replace(std::regex_replace(s, std::regex(R"([0-9]+\.[0-9]+s\b)"), "T"),
                                               std::regex(R"(time="[0-9.]+")"), "time=\"T\"");
  return std::regex_replace(timed, std::regex(R"(timestamp="[0-9T:-]+")"), "timestamp=\"T\"");  // when each ran
}

// The directory a row's "log" line names, which differs by run, as D.
std::string undir(std::string s, const fs::path& dir) {
  for (size_t at; (at = s.find(dir.string())) != std::string::npos;) s.replace(at, dir.string().size(), "D");
  return s;
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

class ZooCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("parity_zoo_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  Result zoo(const std::string& tag, const std::string& args) {
    Result r = parity_cmd("zoo " + args + " --scenarios " + std::string(PARITY_SOURCE_DIR) + "/scenarios --out " +
                          (dir_ / tag).string() + " --junit " + (dir_ / (tag + ".xml")).string());
    r.out = undir(r.out, dir_ / tag);
    return r;
  }
  fs::path dir_;
};

// adam_step_not_restored (a save and a resume) is the slowest of the four: at -j 2 the others
// end before it, and its row still comes first.
TEST_F(ZooCli, TwoAtATimeGiveTheTableOfOneAtATime) {
  const std::string bugs = "adam_step_not_restored router_grad_averaged bias_update_sign tokens_per_expert_local";
  const Result one = zoo("one", "-j 1 " + bugs), two = zoo("two", "-j 2 " + bugs);
  EXPECT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(two.code, 0) << two.out;
  EXPECT_EQ(untimed(two.out), untimed(one.out));
  const std::string table = untimed(two.out);
  const size_t a = table.find("\nadam_step_not_restored "), r = table.find("\nrouter_grad_averaged "),
               b = table.find("\nbias_update_sign "), t = table.find("\ntokens_per_expert_local ");
  ASSERT_NE(t, std::string::npos) << table;
  EXPECT_LT(a, r);
  EXPECT_LT(r, b);
  EXPECT_LT(b, t);
  EXPECT_NE(table.find("zoo verdict: PASS: 4 bugs, 4 caught"), std::string::npos) << table;
  EXPECT_EQ(untimed(slurp(dir_ / "two.xml")), untimed(slurp(dir_ / "one.xml")));
  EXPECT_EQ(files_in(dir_ / "two"), files_in(dir_ / "one"));
  for (const char* bug :
       {"adam_step_not_restored", "router_grad_averaged", "bias_update_sign", "tokens_per_expert_local"})
    for (const char* ext : {".log", ".report.json"})
      EXPECT_EQ(files_in(dir_ / "two").count(bug + std::string(ext)), 1u);
}

// An escaped bug under -j: the same FAIL row, its expectation and its log, exit 1.
TEST_F(ZooCli, AnEscapedBugFailsTheZooAtAnyJobs) {
  const fs::path scen = dir_ / "scen";
  fs::create_directories(scen);
  fs::copy_file(fs::path(PARITY_SOURCE_DIR) / "scenarios" / "tp2.json", scen / "fsdp4.json");  // no dp: escapes
  fs::copy_file(fs::path(PARITY_SOURCE_DIR) / "scenarios" / "tp2.json", scen / "tp2.json");
  const std::string args = "dp_averaged_twice router_grad_averaged --scenarios " + scen.string();
  const Result one = parity_cmd("zoo -j 1 " + args + " --out " + (dir_ / "one").string());
  const Result two = parity_cmd("zoo -j 2 " + args + " --out " + (dir_ / "two").string());
  EXPECT_EQ(one.code, 1) << one.out;
  EXPECT_EQ(two.code, 1) << two.out;
  EXPECT_NE(two.out.find("dp_averaged_twice"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("ESCAPED"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("zoo verdict: FAIL: 2 bugs, 1 caught with their root named, 1 escaped or misnamed"),
            std::string::npos)
      << two.out;
  EXPECT_EQ(untimed(undir(two.out, dir_ / "two")), untimed(undir(one.out, dir_ / "one")));
}

}  // namespace
}  // namespace parity
