// In-process tests: a world of one on each backend, argument checks, environment parsing,
// launcher option checks, and the nccl backend (skipped, visibly, without a GPU).
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/world.h"
#include "comm_checks.h"
#include "core/device.h"
#include "core/error.h"
#include "launch_helpers.h"
#if PARITY_HAVE_CUDA
#include "comm/nccl/nccl_communicator.h"
#endif

namespace parity::comm::testing {
namespace {

void clear_rank_env() {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PARITY_BACKEND",
                        "PARITY_STORE_DIR", "PARITY_COMM_TIMEOUT_MS", "OMPI_COMM_WORLD_RANK", "MASTER_ADDR",
                        "MASTER_PORT", "SLURM_PROCID", "SLURM_STEP_ID", "SLURM_STEPID"})
    unsetenv(v);
}

TEST(WorldOfOne, GlooEveryCollectiveExact) {
  clear_rank_env();
  auto w = make_world_communicator();
  EXPECT_EQ(w->size(), 1);
  EXPECT_EQ(w->rank(), 0);
  EXPECT_EQ(w->name(), "world");
  EXPECT_EQ(w->timeout(), kDefaultTimeout);
  Tally t;
  check_collectives(*w, t, false);
  check_groups(*w, t);
  EXPECT_EQ(report(*w, t), 0);
}

TEST(WorldOfOne, MpiEveryCollectiveExact) {
  clear_rank_env();
  auto w = make_world_communicator(WorldOptions{Backend::mpi, std::nullopt});
  EXPECT_EQ(w->backend(), Backend::mpi);
  Tally t;
  check_collectives(*w, t, false);
  EXPECT_EQ(report(*w, t), 0);
}

TEST(Arguments, WrongSizesThrowNamingTheCollective) {
  clear_rank_env();
  auto w = make_world_communicator();
  std::vector<float> a(3), b(5);
  try {
    w->allgather(std::span<const float>(a), std::span<float>(b));
    FAIL() << "no throw";
  } catch (const CommError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("allgather"), std::string::npos) << m;
    EXPECT_NE(m.find("world"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
  }
  std::vector<int64_t> neg = {-1};
  EXPECT_THROW(w->alltoallv(std::span<const float>(a), std::span<const int64_t>(neg), std::span<float>(b),
                            std::span<const int64_t>(neg)),
               CommError);
  EXPECT_THROW(w->broadcast(std::span<float>(a), 1), CommError);
  EXPECT_THROW(w->group({0, 0}), CommError);
  EXPECT_THROW(w->group({1}), CommError);
  EXPECT_THROW(w->set_timeout(std::chrono::milliseconds(0)), ConfigError);
  // A usage error sends nothing: the communicator is still usable.
  std::vector<double> x = {2.5};
  w->allreduce(std::span<double>(x), ReduceOp::sum);
  EXPECT_EQ(x[0], 2.5);
}

TEST(Environment, ParsesTorchrunAndRejectsNonsense) {
  clear_rank_env();
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("PARITY_STORE_DIR", "/nonexistent", 1);
  setenv("PARITY_COMM_TIMEOUT_MS", "1500", 1);
  RankEnv e = read_rank_env();
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.backend, Backend::gloo);
  EXPECT_EQ(e.timeout.count(), 1500);
  setenv("RANK", "4", 1);
  EXPECT_THROW(read_rank_env(), ConfigError);
  setenv("RANK", "x", 1);
  EXPECT_THROW(read_rank_env(), ConfigError);
  setenv("RANK", "1", 1);
  unsetenv("PARITY_STORE_DIR");
  EXPECT_THROW(read_rank_env(), ConfigError) << "WORLD_SIZE 4 without a rendezvous";
  clear_rank_env();
  EXPECT_THROW(parse_backend("nvshmem"), ConfigError);
  EXPECT_EQ(parse_backend("mpi"), Backend::mpi);
}

TEST(Launcher, RejectsBadOptionsBeforeStartingAnything) {
  LaunchOptions o;
  o.nproc = 0;
  EXPECT_THROW(launch_main(o, {"true"}), ConfigError);
  o.nproc = 2;
  EXPECT_THROW(launch_main(o, {}), ConfigError);
}

TEST(Launcher, MissingCommandFailsWith127) {
  auto r = run_worker(Backend::gloo, 2, {});  // the worker with no mode exits 1
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.store_entries_left, 0);
  EXPECT_EQ(r.children_left, 0);
  LaunchOptions o;
  o.nproc = 2;
  auto before = child_pids();
  EXPECT_EQ(launch_main(o, {"/nonexistent/parity-worker"}), 127);
  EXPECT_EQ(child_pids(), before);
}

TEST(Nccl, CollectivesOnDevice) {
#if PARITY_HAVE_CUDA
  if (parity::cuda_device_count() == 0)
    GTEST_SKIP() << "nccl backend is compiled but no CUDA device is visible: nothing run on a GPU";
  auto r = run_worker(Backend::nccl, std::min(parity::cuda_device_count(), 2), {"nccl"});
  EXPECT_EQ(r.code, 0) << r.all();
#else
  GTEST_SKIP() << "nccl backend not built: CUDA toolkit or NCCL not found at configure time";
#endif
}

}  // namespace
}  // namespace parity::comm::testing
