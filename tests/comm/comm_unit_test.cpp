// In-process tests: a world of one on each backend, argument checks, environment parsing,
// launcher option checks, and the nccl backend (skipped, visibly, without a GPU).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "proc/leftovers.h"
#include "comm/world.h"
#include "comm_checks.h"
#include "core/device.h"
#include "core/error.h"
#include "launch_helpers.h"
#if PARITY_HAVE_CUDA
#include "comm/nccl/nccl_communicator.h"
#endif

namespace parity::comm::testing {

using namespace parity::proc;
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

// The per-host cap: refused, never clamped, before anything starts (issue 26).
TEST(Launcher, RefusesMoreRanksThanThePerHostCap) {
  LaunchOptions o;
  o.nproc = kMaxRanksPerHost + 1;
  const auto before = child_pids();
  try {
    launch_main(o, {"true"});
    ADD_FAILURE() << "-n " << o.nproc << " was launched";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--nproc: must be at most 256 (the per-host cap"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(child_pids(), before);
}

// A directory of a launcher that is gone is removed; one whose launcher runs (this process),
// and a name of another prefix, are kept (proc/leftovers.h).
TEST(Leftovers, OnlyDirectoriesOfLaunchersThatAreGoneAreSwept) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("parity-leftovers-test-" + std::to_string(getpid()));
  fs::create_directories(root);
  const std::string mine = make_owned_dir(root.string(), "parity-mpi-");
  EXPECT_EQ(process_id(getpid()), [&] {
    std::ifstream f(mine + "/launcher");
    std::string l;
    std::getline(f, l);
    return l;
  }());
  const fs::path gone = root / "parity-mpi-gone", reused = root / "parity-mpi-reused", other = root / "vader_segment.x";
  fs::create_directories(gone);
  fs::create_directories(reused);
  fs::create_directories(other);
  std::ofstream(gone / "launcher") << "999999999 1\n";                       // no such pid
  std::ofstream(reused / "launcher") << std::to_string(getpid()) << " 1\n";  // this pid, another start time
  EXPECT_EQ(remove_stale_owned_dirs(root.string(), "parity-mpi-"), 2);
  EXPECT_TRUE(fs::exists(mine));
  EXPECT_FALSE(fs::exists(gone));
  EXPECT_FALSE(fs::exists(reused));
  EXPECT_TRUE(fs::exists(other));
  std::vector<std::string> env = {"OMPI_MCA_btl_vader_backing_directory=/elsewhere", "HOME=/root"};
  mpi_dirs_env(env, "/dev/shm/parity-mpi-x", "/tmp/parity-rdzv-y");
  EXPECT_EQ(env, (std::vector<std::string>{"HOME=/root", "OMPI_MCA_btl_vader_backing_directory=/dev/shm/parity-mpi-x",
                                           "OMPI_MCA_orte_tmpdir_base=/tmp/parity-rdzv-y"}));
  fs::remove_all(root);
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
