// The one job loop of matrix and zoo (src/cli/jobs.h), with a starter of the test's own: each
// job is a /bin/sh script (its args[0]). At most N run at once, started in the order given;
// one callback per job, in the order they end; exit codes and signals mapped as a shell does;
// InOrder shows the rows in the jobs' order whatever order they end in.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/jobs.h"
#include "cli/self.h"

extern char** environ;

namespace parity::cli {
namespace {

namespace fs = std::filesystem;

class Jobs : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("parity_jobs_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Job job(const std::string& script) {
    const std::string log = (dir_ / ("job" + std::to_string(n_++) + ".log")).string();
    return {{script}, log, "test: " + script};
  }

  // Runs the jobs, counting how many are running as each starts and ends.
  void run(const std::vector<Job>& jobs, int at_once) {
    ends_.assign(jobs.size(), JobEnd{});
    run_jobs(
        jobs, at_once,
        [&](const Job& j) {
          started_.push_back(j.what);
          max_running_ = std::max(max_running_, ++running_);
          return start_sh(j);
        },
        [&](size_t i, const JobEnd& end) {
          --running_;
          order_.push_back(i);
          ends_.at(i) = end;
        });
  }

  static pid_t start_sh(const Job& j) {
    const char* argv[] = {"/bin/sh", "-c", j.args.at(0).c_str(), nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, j.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    const int err = posix_spawn(&pid, argv[0], &fa, nullptr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(err, 0);
    return pid;
  }

  fs::path dir_;
  int n_ = 0, running_ = 0, max_running_ = 0;
  std::vector<std::string> started_;
  std::vector<size_t> order_;
  std::vector<JobEnd> ends_;
};

TEST_F(Jobs, AtMostNAtOnceStartedInOrderOneCallbackEach) {
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back(job("sleep 0.2; echo " + std::to_string(i)));
  run(jobs, 2);
  EXPECT_EQ(max_running_, 2);
  EXPECT_EQ(running_, 0);
  std::vector<std::string> whats;
  for (const Job& j : jobs) whats.push_back(j.what);
  EXPECT_EQ(started_, whats);
  std::vector<size_t> sorted = order_;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));  // each job's callback exactly once
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(ends_[i].rc, 0);
    EXPECT_GE(ends_[i].seconds, 0.15);
    std::ifstream f(jobs[i].log);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(ss.str(), std::to_string(i) + "\n");
  }
}

TEST_F(Jobs, OneAtATimeRunsThemOneAfterAnother) {
  run({job("sleep 0.1"), job("sleep 0.1"), job("sleep 0.1")}, 1);
  EXPECT_EQ(max_running_, 1);
  EXPECT_EQ(order_, (std::vector<size_t>{0, 1, 2}));
}

TEST_F(Jobs, ExitCodesAndSignalsMappedAsAShellDoes) {
  run({job("exit 0"), job("exit 3"), job("exit 77"), job("kill -TERM $$"), job("kill -KILL $$")}, 5);
  ASSERT_EQ(order_.size(), 5u);
  EXPECT_EQ(ends_[0].rc, 0);
  EXPECT_EQ(ends_[1].rc, 3);
  EXPECT_EQ(ends_[2].rc, 77);
  EXPECT_EQ(ends_[3].rc, 128 + 15);
  EXPECT_EQ(ends_[4].rc, 128 + 9);
}

TEST_F(Jobs, CallbackInTheOrderTheyEndWithTheirOwnTimes) {
  run({job("sleep 0.6"), job("sleep 0.1"), job("exit 1")}, 2);
  // 0 and 1 start; 1 ends, 2 starts and ends at once; 0 ends last.
  EXPECT_EQ(order_, (std::vector<size_t>{1, 2, 0}));
  EXPECT_GE(ends_[0].seconds, 0.55);
  EXPECT_LT(ends_[1].seconds, 0.55);
  EXPECT_EQ(ends_[2].rc, 1);
}

TEST_F(Jobs, NoJobsNoCalls) {
  run({}, 3);
  EXPECT_TRUE(started_.empty());
  EXPECT_TRUE(order_.empty());
}

TEST(InOrder, ShowsEachOnceTheOnesBeforeItAreDone) {
  std::vector<size_t> shown;
  InOrder rows(4, [&](size_t i) { shown.push_back(i); });
  rows.done(2);
  EXPECT_TRUE(shown.empty());
  rows.done(0);
  EXPECT_EQ(shown, (std::vector<size_t>{0}));
  rows.done(3);
  EXPECT_EQ(shown, (std::vector<size_t>{0}));
  rows.done(1);
  EXPECT_EQ(shown, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(rows.shown(), 4u);
}

// A job's environment (spawn_self): the caller's, plus glibc's heap settings unless the caller
// set GLIBC_TUNABLES itself, which then passes unchanged and alone.
TEST(JobEnvironment, AddsTheHeapSettingsUnlessTheUserSetThem) {
  auto strings = [](const std::vector<char*>& env) {
    EXPECT_FALSE(env.empty());
    EXPECT_EQ(env.back(), nullptr);
    std::vector<std::string> out;
    for (char* e : env)
      if (e != nullptr) out.emplace_back(e);
    return out;
  };
  char path[] = "PATH=/bin", home[] = "HOME=/root", mine[] = "GLIBC_TUNABLES=glibc.malloc.arena_max=1";
  char* plain[] = {path, home, nullptr};
  const auto added = strings(job_environment(plain));
  ASSERT_EQ(added.size(), 3u);
  EXPECT_EQ(added[0], "PATH=/bin");
  EXPECT_EQ(added[1], "HOME=/root");
  EXPECT_EQ(added[2], "GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.top_pad=4194304");
  char* with_own[] = {path, mine, home, nullptr};
  EXPECT_EQ(strings(job_environment(with_own)),
            (std::vector<std::string>{"PATH=/bin", "GLIBC_TUNABLES=glibc.malloc.arena_max=1", "HOME=/root"}));
}

}  // namespace
}  // namespace parity::cli
