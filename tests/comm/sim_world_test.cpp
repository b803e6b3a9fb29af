// The simulated world (comm/sim/sim_world.h): every collective exact on every rank and group,
// the random-count properties, the same bits as gloo's shared-memory path on non-exact sums,
// and its failures named (a rank that throws, one that stalls, members that disagree).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "comm/sim/sim_world.h"
#include "comm_checks.h"
#include "core/error.h"
#include "launch_helpers.h"

namespace parity::comm::testing {
namespace sim_world_test {

struct SimResult {
  std::vector<int> codes;
  std::vector<std::string> errors;
  double seconds = 0;
};

// Runs body in w threads, each rank's world communicator its argument; a throw is that rank's
// error (exit 1), named to the others as a process launcher would see it exit.
SimResult run_sim(int w, std::chrono::milliseconds timeout, const std::function<int(Communicator&)>& body,
                  SimOrder order = SimOrder::rank) {
  auto world = make_sim_world(w, timeout);
  set_sim_order(*world, order);
  SimResult res;
  res.codes.assign(static_cast<size_t>(w), 0);
  res.errors.assign(static_cast<size_t>(w), "");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int r = 0; r < w; ++r)
    ts.emplace_back([&, r] {
      int code = 0;
      std::string err;
      try {
        auto c = make_sim_rank(world, r);
        code = body(*c);
      } catch (const std::exception& e) {
        code = 1, err = e.what();
      }
      res.codes[static_cast<size_t>(r)] = code, res.errors[static_cast<size_t>(r)] = err;
      sim_rank_ended(*world, r, code, err);
    });
  for (auto& t : ts) t.join();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::string all_errors(const SimResult& r) {
  std::ostringstream o;
  for (size_t i = 0; i < r.errors.size(); ++i) o << "rank " << i << " (" << r.codes[i] << "): " << r.errors[i] << "\n";
  return o.str();
}

class SimCollectives : public ::testing::TestWithParam<int> {};

TEST_P(SimCollectives, ExactOnEveryRankAndGroup) {
  const int w = GetParam();
  std::atomic<int64_t> wrong{-1};
  auto r = run_sim(w, std::chrono::seconds(30), [&](Communicator& c) {
    EXPECT_EQ(c.backend(), Backend::sim);
    EXPECT_EQ(c.transport(), "threads");
    Tally t;
    check_collectives(c, t, w == 3);
    check_groups(c, t);
    const int64_t bad = report(c, t);
    if (c.rank() == 0) wrong = bad;
    return bad == 0 ? 0 : 1;
  });
  EXPECT_EQ(wrong.load(), 0);
  for (int code : r.codes) EXPECT_EQ(code, 0) << all_errors(r);
}

INSTANTIATE_TEST_SUITE_P(Sim, SimCollectives, ::testing::Values(1, 2, 3, 5, 8, 16));

// Random count matrices with zeros (the same draws on every rank): alltoallv and allgatherv
// deliver every block. (RapidCheck's run_properties keeps global state: one property run per
// process, so the simulated world's threads draw their own cases here.)
TEST(SimCollectives, RandomCountsWithZeros) {
  const int w = 5;
  auto r = run_sim(w, std::chrono::seconds(30), [&](Communicator& c) {
    std::mt19937_64 gen(7);
    int64_t bad = 0;
    for (int it = 0; it < 60; ++it) {
      std::vector<int64_t> m(static_cast<size_t>(w * w));
      for (auto& x : m) x = gen() % 3 == 0 ? 0 : static_cast<int64_t>(gen() % 9);
      const int me = c.rank();
      std::vector<int64_t> send(w), recv(w), counts(w);
      std::vector<double> in, want, gin, gwant;
      for (int j = 0; j < w; ++j) {
        send[j] = m[static_cast<size_t>(me * w + j)], recv[j] = m[static_cast<size_t>(j * w + me)];
        counts[j] = m[static_cast<size_t>(j)];
        for (int64_t i = 0; i < send[j]; ++i) in.push_back(me * 1e6 + j * 1e3 + static_cast<double>(i));
        for (int64_t i = 0; i < recv[j]; ++i) want.push_back(j * 1e6 + me * 1e3 + static_cast<double>(i));
        for (int64_t i = 0; i < counts[j]; ++i) gwant.push_back(j * 1e3 + static_cast<double>(i));
      }
      for (int64_t i = 0; i < counts[me]; ++i) gin.push_back(me * 1e3 + static_cast<double>(i));
      std::vector<double> out(want.size()), gout(gwant.size());
      c.alltoallv(std::span<const double>(in), std::span<const int64_t>(send), std::span<double>(out),
                  std::span<const int64_t>(recv));
      c.allgatherv(std::span<const double>(gin), std::span<double>(gout), std::span<const int64_t>(counts));
      for (size_t i = 0; i < out.size(); ++i) bad += out[i] != want[i];
      for (size_t i = 0; i < gout.size(); ++i) bad += gout[i] != gwant[i];
    }
    return bad == 0 ? 0 : 1;
  });
  for (int code : r.codes) EXPECT_EQ(code, 0) << all_errors(r);
}

// Non-exact fp32 / fp64 data, sum allreduces included (1009 elements, and 20000 fp64: gloo's
// two-step split on shared memory): sim's left fold in group-rank order gives gloo's bits.
TEST(CrossBackend, SimAndGlooGiveTheSameBits) {
  for (int w : {3, 4}) {
    std::atomic<uint64_t> sim_digest{0};
    auto r = run_sim(w, std::chrono::seconds(30), [&](Communicator& c) {
      const uint64_t d = digest_collectives(c, true);
      if (c.rank() == 0) sim_digest = d;
      return 0;
    });
    for (int code : r.codes) ASSERT_EQ(code, 0) << all_errors(r);
    const std::string file =
        (std::filesystem::temp_directory_path() / ("parity-sim-digest-" + std::to_string(getpid()))).string();
    auto g = run_worker(Backend::gloo, w, {"digest", file, "sum"}, std::chrono::seconds(30));
    ASSERT_EQ(g.code, 0) << g.all();
    std::string gloo = read_file(file);
    std::filesystem::remove(file);
    while (!gloo.empty() && (gloo.back() == '\n' || gloo.back() == ' ')) gloo.pop_back();
    std::ostringstream mine;
    mine << std::hex << sim_digest.load();
    EXPECT_FALSE(gloo.empty());
    EXPECT_EQ(mine.str(), gloo) << "world " << w;
  }
}

// A rank that throws before a collective: the others fail at once (not at their timeout),
// naming it with its exit code and error.
TEST(SimFaults, RankThatThrowsIsNamedAtOnce) {
  auto r = run_sim(4, std::chrono::seconds(20), [](Communicator& c) {
    if (c.rank() == 2) throw Error("boom in rank 2");
    std::vector<double> x(7, 1.0);
    c.allreduce(std::span<double>(x), ReduceOp::sum);
    return 0;
  });
  EXPECT_LT(r.seconds, 10.0);
  for (int i : {0, 1, 3}) {
    EXPECT_EQ(r.codes[static_cast<size_t>(i)], 1);
    const std::string& e = r.errors[static_cast<size_t>(i)];
    EXPECT_NE(e.find("allreduce #1"), std::string::npos) << e;
    EXPECT_NE(e.find("missing rank 2 has ended (exit 1): boom in rank 2"), std::string::npos) << e;
  }
}

// A rank that stalls in compute: the others time out and name it as running, outside any
// collective, with its last one.
TEST(SimFaults, RankThatStallsIsNamedAtTheTimeout) {
  auto r = run_sim(3, std::chrono::milliseconds(300), [](Communicator& c) {
    c.barrier();
    if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    std::vector<float> x(3, 1.0f);
    c.allreduce(std::span<float>(x), ReduceOp::max);
    return 0;
  });
  for (int i : {0, 2}) {
    const std::string& e = r.errors[static_cast<size_t>(i)];
    EXPECT_NE(e.find("allreduce #2"), std::string::npos) << e;
    EXPECT_NE(e.find("timed out after 300 ms"), std::string::npos) << e;
    EXPECT_NE(e.find("missing rank 1 is running, not in a collective (its last: barrier #1 of world)"),
              std::string::npos)
        << e;
  }
  EXPECT_EQ(r.codes[1], 1) << "the stalled rank finds the others gone when it arrives";
}

// Members that call different collectives fail together, saying which did what.
TEST(SimFaults, DifferentCollectivesFailEveryMember) {
  auto r = run_sim(2, std::chrono::seconds(20), [](Communicator& c) {
    std::vector<double> x(4, 1.0), y(8);
    if (c.rank() == 0)
      c.allreduce(std::span<double>(x), ReduceOp::sum);
    else
      c.allgather(std::span<const double>(x), std::span<double>(y));
    return 0;
  });
  for (const auto& e : r.errors)
    EXPECT_NE(e.find("the members called different collectives: group rank 1 allgather (fp64, 4 elements), "
                     "group rank 0 allreduce (fp64, 4 elements, sum)"),
              std::string::npos)
        << e;
}

// A group waiting on a member that is in another group's collective names where it waits.
TEST(SimFaults, MemberWaitingElsewhereIsNamedWithItsGroup) {
  auto r = run_sim(3, std::chrono::milliseconds(300), [](Communicator& c) {
    if (c.rank() != 0) c.set_timeout(std::chrono::seconds(20));  // rank 0 times out first, while 2 still waits
    std::vector<double> x(2, 1.0);
    if (c.rank() == 2) {
      c.group({1, 2}).allreduce(std::span<double>(x), ReduceOp::sum);  // rank 1 never comes
      return 0;
    }
    c.group({0, 1}).barrier();
    c.allreduce(std::span<double>(x), ReduceOp::sum);  // rank 2 is in group{1,2}
    return 0;
  });
  const std::string& e = r.errors[0];
  EXPECT_NE(e.find("missing rank 2 waits in allreduce #1 of group{1,2}"), std::string::npos) << all_errors(r);
}

// The ring order (PARITY_SIM_ORDER=ring, NCCL's ring): an all-reduce of n elements over W members
// sums chunk c (ceil(n / W) elements) from member c + 1 around to member c, a reduce-scatter
// member j's block from j + 1 around to j; every member gets the same bits. Member r holds
// v[(r + e) % 4] at element e, v = {1, 2^-53, 2^-53, -1}: a sum whose bits depend on its order
// (rank order: 0 for some elements, the ring's: 2^-52 for some), so the test fails if the ring's
// order is not the one described.
double fold_from(const std::vector<std::vector<double>>& x, size_t e, size_t start) {
  const size_t w = x.size();
  double acc = x[start % w][e];
  for (size_t k = 1; k < w; ++k) acc += x[(start + k) % w][e];
  return acc;
}

TEST(SimOrder, RingSumsEachChunkAroundTheRingAndEveryMemberGetsItsBits) {
  const int w = 4;
  const int64_t n = 10;  // chunks of 3: elements 9 is chunk 3
  const std::vector<double> v = {1.0, 0x1p-53, 0x1p-53, -1.0};
  std::vector<std::vector<double>> in(w, std::vector<double>(n)), all(w), mine(w);
  for (int r = 0; r < w; ++r)
    for (int64_t e = 0; e < n; ++e) in[r][e] = v[static_cast<size_t>((r + e) % 4)];
  const std::vector<int64_t> counts = {3, 3, 2, 2};
  auto res = run_sim(w, std::chrono::seconds(30), [&](Communicator& c) {
    std::vector<double> buf = in[static_cast<size_t>(c.rank())];
    c.allreduce(std::span<double>(buf), ReduceOp::sum);
    all[static_cast<size_t>(c.rank())] = buf;
    std::vector<double> out(static_cast<size_t>(counts[static_cast<size_t>(c.rank())]));
    c.reduce_scatterv(std::span<const double>(in[static_cast<size_t>(c.rank())]), std::span<double>(out),
                      std::span<const int64_t>(counts), ReduceOp::sum);
    mine[static_cast<size_t>(c.rank())] = out;
    return 0;
  }, SimOrder::ring);
  for (int code : res.codes) ASSERT_EQ(code, 0) << all_errors(res);
  int differs_from_rank_order = 0;
  for (int64_t e = 0; e < n; ++e) {
    const double want = fold_from(in, static_cast<size_t>(e), static_cast<size_t>(e / 3 + 1));
    for (int r = 0; r < w; ++r) EXPECT_EQ(std::memcmp(&all[r][e], &want, sizeof want), 0) << "element " << e;
    differs_from_rank_order += fold_from(in, static_cast<size_t>(e), 0) != want;
  }
  EXPECT_GT(differs_from_rank_order, 0) << "the data does not tell the two orders apart";
  int64_t off = 0;
  for (int j = 0; j < w; ++j) {
    for (int64_t i = 0; i < counts[static_cast<size_t>(j)]; ++i) {
      const double want = fold_from(in, static_cast<size_t>(off + i), static_cast<size_t>(j + 1));
      EXPECT_EQ(std::memcmp(&mine[j][i], &want, sizeof want), 0) << "member " << j << " element " << i;
    }
    off += counts[static_cast<size_t>(j)];
  }
  EXPECT_EQ(parse_sim_order("ring"), SimOrder::ring);
  EXPECT_EQ(parse_sim_order("rank"), SimOrder::rank);
  EXPECT_THROW(parse_sim_order("nccl"), ConfigError);
}

TEST(SimWorld, SizeOutsideItsRangeIsRefused) {
  EXPECT_THROW(make_sim_world(0, std::chrono::seconds(1)), ConfigError);
  EXPECT_THROW(make_sim_world(kMaxSimRanks + 1, std::chrono::seconds(1)), ConfigError);
}

}  // namespace sim_world_test
}  // namespace parity::comm::testing
