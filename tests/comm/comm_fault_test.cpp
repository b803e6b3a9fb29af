// Failures never hang: a killed rank, a rank that never joins, a rank that exits early,
// a rank that never reaches the collective. The survivors must fail within
// timeout + 5 s naming the collective, the group and the missing rank; the launcher must
// exit non-zero and leave no process and no store file behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <thread>

#include "launch_helpers.h"

namespace parity::comm::testing {
namespace {

using namespace std::chrono_literals;
constexpr auto kTimeout = 3000ms;
constexpr double kBound = 3.0 + 5.0;  // timeout + 5 s

void expect_clean(const LaunchResult& r) {
  EXPECT_NE(r.code, 0) << r.all();
  EXPECT_EQ(r.store_entries_left, 0) << "store files left behind";
  EXPECT_EQ(r.children_left, 0) << "a rank process is still around";
}

// Every survivor's log names the operation, the group and the missing rank.
void expect_named(const LaunchResult& r, int missing, const std::string& op) {
  for (size_t i = 0; i < r.logs.size(); ++i) {
    if (static_cast<int>(i) == missing) continue;
    const std::string& log = r.logs[i];
    EXPECT_NE(log.find("CommError"), std::string::npos) << "rank " << i << ":\n" << log;
    EXPECT_NE(log.find(op), std::string::npos) << "rank " << i << ":\n" << log;
    EXPECT_NE(log.find("world"), std::string::npos) << "rank " << i << ":\n" << log;
    EXPECT_NE(log.find("rank " + std::to_string(missing)), std::string::npos) << "rank " << i << ":\n" << log;
  }
}

// Rank 2 of 4 killed in an allreduce: the survivors see that it has exited. `env` picks the
// transport (none: the default, shared memory on one host).
void killed_mid_allreduce(const std::vector<std::string>& env) {
  // The survivors' own messages are what this test reads: they get 5 s to write them (the
  // launcher's default grace of 1 s can cut them short on a loaded machine; the launcher's
  // speed after a death is fault.kill9_gloo's to check, and its summary names the rank).
  auto r = run_worker(Backend::gloo, 4, {"kill", "2"}, kTimeout, 5000ms, env);
  expect_clean(r);
  EXPECT_EQ(r.code, 3) << "a rank killed by a signal: infrastructure failed (core/exit_codes.h)";
  EXPECT_LT(r.seconds, kBound + 1.0);
  expect_named(r, 2, "allreduce");
  EXPECT_NE(r.logs[0].find("has exited"), std::string::npos) << r.logs[0];
}

// Rank 3 of 4 alive but never calling the collective: named as not reaching allreduce #2.
void never_reaches_the_collective(const std::vector<std::string>& env) {
  auto r = run_worker(Backend::gloo, 4, {"stall", "3"}, kTimeout, 1000ms, env);
  expect_clean(r);
  EXPECT_EQ(r.code, 3);
  EXPECT_LT(r.seconds, kBound + 2.0);
  expect_named(r, 3, "allreduce #2");
  EXPECT_NE(r.logs[0].find("did not report reaching"), std::string::npos) << r.logs[0];
}

TEST(GlooFaults, RankKilledMidAllreduce) { killed_mid_allreduce({}); }

TEST(GlooFaults, RankNeverJoins) {
  auto r = run_worker(Backend::gloo, 3, {"absent", "1"}, kTimeout, 1000ms);
  expect_clean(r);
  EXPECT_EQ(r.code, 3);
  EXPECT_LT(r.seconds, kBound + 1.0);
  expect_named(r, 1, "rendezvous");
  EXPECT_NE(r.logs[0].find("never arrived"), std::string::npos) << r.logs[0];
}

TEST(GlooFaults, RankExitsBeforeJoining) {
  auto r = run_worker(Backend::gloo, 3, {"exit", "2"}, kTimeout, 1000ms);
  expect_clean(r);
  EXPECT_LT(r.seconds, kBound + 1.0);
  expect_named(r, 2, "rendezvous");
}

TEST(GlooFaults, RankNeverReachesTheCollective) { never_reaches_the_collective({}); }

// A group's member that exits after the world is made but before its group: the partner
// names it, whether the one gone would have created the group's shared memory (rank 2 of
// the pair {2, 3}) or opened it (rank 3); the other pair finishes.
TEST(GlooFaults, GroupMemberExitsBeforeTheGroupIsMade) {
  for (int gone : {2, 3}) {
    auto r = run_worker(Backend::gloo, 4, {"groupexit", std::to_string(gone)}, kTimeout, 1000ms);
    expect_clean(r);
    EXPECT_EQ(r.code, 3) << r.all();
    EXPECT_LT(r.seconds, kBound + 1.0);
    const std::string& partner = r.logs[static_cast<size_t>(gone == 2 ? 3 : 2)];
    EXPECT_NE(partner.find("CommError"), std::string::npos) << partner;
    EXPECT_NE(partner.find("creating group{2,3}"), std::string::npos) << partner;
    EXPECT_NE(partner.find("rank " + std::to_string(gone)), std::string::npos) << partner;
    EXPECT_NE(partner.find("exited"), std::string::npos) << partner;
    for (int r0 : {0, 1}) EXPECT_EQ(r.logs[static_cast<size_t>(r0)].find("CommError"), std::string::npos) << r.all();
  }
}

// The same two failures on gloo's TCP transport (the default on one host is shared memory).
TEST(GlooTcpFaults, RankKilledMidAllreduce) { killed_mid_allreduce({"PARITY_GLOO_SHM=0"}); }
TEST(GlooTcpFaults, RankNeverReachesTheCollective) { never_reaches_the_collective({"PARITY_GLOO_SHM=0"}); }

TEST(MpiFaults, RankKilledMidAllreduce) {
  auto r = run_worker(Backend::mpi, 3, {"kill", "1"}, kTimeout);
  expect_clean(r);
  EXPECT_LT(r.seconds, kBound + 2.0);
  // mpirun aborts the job as soon as a rank dies and names it itself.
  EXPECT_NE(r.logs[0].find("rank 1"), std::string::npos) << r.logs[0];
}

TEST(MpiFaults, RankNeverReachesTheCollective) {
  auto r = run_worker(Backend::mpi, 3, {"stall", "2"}, kTimeout, 1000ms);
  expect_clean(r);
  EXPECT_LT(r.seconds, kBound + 2.0);
  EXPECT_NE(r.logs[0].find("allreduce #2"), std::string::npos) << r.logs[0];
  EXPECT_NE(r.logs[0].find("missing rank 2"), std::string::npos) << r.logs[0];
}

// SIGTERM / SIGINT to the launcher (a separate process) stops every rank.
void signal_launcher(int sig) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "parity-sig-XXXXXX").string();
  std::string dir = mkdtemp(tmpl.data());
  std::string out = dir + "/out.txt";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FILE* f = freopen(out.c_str(), "w", stdout);
    if (!f) _exit(99);
    execl(PARITY_COMM_LAUNCH, PARITY_COMM_LAUNCH, "-n", "3", "--store-root", dir.c_str(), "--",
          PARITY_COMM_WORKER, "sleep", static_cast<char*>(nullptr));
    _exit(98);
  }
  std::string text;
  for (int i = 0; i < 200 && std::count(text.begin(), text.end(), '\n') < 3; ++i) {
    std::this_thread::sleep_for(50ms);
    text = read_file(out);
  }
  ASSERT_EQ(std::count(text.begin(), text.end(), '\n'), 3) << text;
  std::vector<pid_t> ranks;
  for (size_t p = text.find("pid "); p != std::string::npos; p = text.find("pid ", p + 1))
    ranks.push_back(static_cast<pid_t>(std::stol(text.substr(p + 4))));
  ASSERT_EQ(ranks.size(), 3u) << text;
  auto t0 = std::chrono::steady_clock::now();
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
  for (pid_t r : ranks) EXPECT_NE(kill(r, 0), 0) << "rank pid " << r << " survived";
  int left = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++left;
  EXPECT_EQ(left, 1) << "only out.txt may remain (store dir removed)";
  std::filesystem::remove_all(dir);
}

TEST(Launcher, SigtermStopsEveryRank) { signal_launcher(SIGTERM); }
TEST(Launcher, SigintStopsEveryRank) { signal_launcher(SIGINT); }

}  // namespace
}  // namespace parity::comm::testing
