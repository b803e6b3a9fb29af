// Every collective on every CPU backend, world sizes 1 to 8, exact inputs, #wrong summed
// over all ranks (the worker prints the table and exits non-zero on any wrong element).
#include <gtest/gtest.h>

#include <tuple>

#include "launch_helpers.h"

namespace parity::comm::testing {
namespace {

class Collectives : public ::testing::TestWithParam<std::tuple<Backend, int>> {};

TEST_P(Collectives, ExactOnEveryRankAndGroup) {
  auto [backend, world] = GetParam();
  // The multi-segment sizes (> 2 MiB per rank) run at the small world sizes only, to keep
  // the suite within its time budget on two cores.
  std::vector<std::string> args = {"collectives"};
  if (world == 2 || world == 3) args.push_back("large");
  auto r = run_worker(backend, world, args);
  EXPECT_EQ(r.code, 0) << r.all();
  if (backend == Backend::gloo && world > 1) {
    EXPECT_NE(r.logs[0].find("(shm)"), std::string::npos) << "one host: the shared-memory path\n" << r.logs[0];
  }
  EXPECT_EQ(r.store_entries_left, 0);
  EXPECT_EQ(r.children_left, 0);
}

std::string name(const ::testing::TestParamInfo<std::tuple<Backend, int>>& p) {
  return std::string(backend_name(std::get<0>(p.param))) + "_w" + std::to_string(std::get<1>(p.param));
}

INSTANTIATE_TEST_SUITE_P(Cpu, Collectives,
                         ::testing::Combine(::testing::Values(Backend::gloo, Backend::mpi),
                                            ::testing::Range(1, 9)),
                         name);

// Gloo's TCP transport (PARITY_GLOO_SHM=0): on one host the gloo backend takes the
// shared-memory path by default (the Collectives above); the TCP pairs stay the path
// across hosts and must stay exact too.
class GlooTcpCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GlooTcpCollectives, ExactOnEveryRankAndGroup) {
  const int world = GetParam();
  std::vector<std::string> args = {"collectives"};
  if (world == 2 || world == 3) args.push_back("large");
  auto r = run_worker(Backend::gloo, world, args, std::chrono::seconds(30), std::chrono::milliseconds(-1),
                      {"PARITY_GLOO_SHM=0"});
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.logs[0].find("(tcp)"), std::string::npos) << "not the TCP transport:\n" << r.logs[0];
  EXPECT_EQ(r.store_entries_left, 0);
  EXPECT_EQ(r.children_left, 0);
}

INSTANTIATE_TEST_SUITE_P(Cpu, GlooTcpCollectives, ::testing::Range(1, 9));

// Random counts including zeros; every rank runs the same RapidCheck cases.
TEST(CollectiveProperties, GlooWorld5) {
  auto r = run_worker(Backend::gloo, 5, {"props", "40"});
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.logs[0].find("OK, passed 40 tests"), std::string::npos) << r.logs[0];
}

TEST(CollectiveProperties, MpiWorld3) {
  auto r = run_worker(Backend::mpi, 3, {"props", "25"});
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.logs[0].find("OK, passed 25 tests"), std::string::npos) << r.logs[0];
}

// The same non-exact inputs give the same bits under gloo and under mpi for every
// collective whose result cannot depend on the backend (reduce_scatter is reduced in
// rank order by both).
// Runs the digest worker at `world` ranks as `a` and as `b` (a backend and extra environment
// each) and expects both digests non-empty and equal.
struct DigestRun {
  Backend backend;
  std::vector<std::string> env;
};
void expect_same_digest(int world, const std::string& tag, const DigestRun& a, const DigestRun& b,
                        const std::vector<std::string>& extra = {}) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("parity-digest-" + tag + "-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  std::vector<std::string> digests;
  for (const DigestRun* r : {&a, &b}) {
    std::vector<std::string> args{"digest", dir + "/" + std::to_string(digests.size())};
    args.insert(args.end(), extra.begin(), extra.end());
    auto res = run_worker(r->backend, world, args, std::chrono::seconds(30), std::chrono::milliseconds(-1), r->env);
    ASSERT_EQ(res.code, 0) << res.all();
    digests.push_back(read_file(args[1]));
  }
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(digests[0].empty());
  EXPECT_EQ(digests[0], digests[1]) << "world " << world;
}

TEST(CrossBackend, GlooAndMpiGiveTheSameBits) {
  for (int world : {3, 4}) expect_same_digest(world, "b", {Backend::gloo, {}}, {Backend::mpi, {}});
}

// Gloo's two paths give the same bits for everything the digest holds plus sum allreduces
// of non-exact inputs (1009 elements: one step; 20000 fp64: the two-step split on the
// shared-memory path, the direct round on TCP, both in group-rank order).
TEST(CrossTransport, GlooShmAndTcpGiveTheSameBits) {
  for (int world : {3, 4})
    expect_same_digest(world, "t", {Backend::gloo, {}}, {Backend::gloo, {"PARITY_GLOO_SHM=0"}}, {"sum"});
}

}  // namespace
}  // namespace parity::comm::testing
