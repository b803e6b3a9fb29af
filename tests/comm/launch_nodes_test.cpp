// One launcher per host (`parity launch --nnodes N --node-rank R --master ADDR:PORT`):
// the identity it gives its ranks, and the options it refuses before starting anything.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "proc/launch.h"
#include "core/error.h"

using namespace parity;
using namespace parity::comm;
using namespace parity::proc;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string refused(const LaunchOptions& o) {
  try {
    launch_main(o, {"true"});
  } catch (const ConfigError& e) {
    return e.path();
  }
  return "";
}

}  // namespace

TEST(LaunchNodes, RanksOfTheSecondHostGetGlobalRanksAndTheMaster) {
  const std::string dir = std::filesystem::temp_directory_path() / ("parity-nodes-" + std::to_string(getpid()));
  LaunchOptions o;
  o.nproc = 2, o.nnodes = 3, o.node_rank = 1, o.master = "10.213.0.1:29500";
  o.log_dir = dir;
  o.prefix_output = false;
  const std::vector<std::string> cmd{
      "/bin/sh", "-c",
      "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT ${PARITY_STORE_DIR:-no-store}"};
  ASSERT_EQ(launch_main(o, cmd), 0);
  EXPECT_EQ(read_all(dir + "/rank2.log"), "2 6 0 2 10.213.0.1 29500 no-store");
  EXPECT_EQ(read_all(dir + "/rank3.log"), "3 6 1 2 10.213.0.1 29500 no-store");
  EXPECT_FALSE(std::filesystem::exists(dir + "/rank0.log")) << "rank 0 runs on node 0";
  std::filesystem::remove_all(dir);
}

TEST(LaunchNodes, RefusesBadOptionsNamingThem) {
  LaunchOptions o;
  o.nproc = 2, o.nnodes = 2, o.node_rank = 0, o.master = "10.0.0.1:29500";
  EXPECT_EQ(refused(o), "");
  LaunchOptions bad = o;
  bad.node_rank = 2;
  EXPECT_EQ(refused(bad), "--node-rank");
  bad = o, bad.nnodes = 0;
  EXPECT_EQ(refused(bad), "--nnodes");
  bad = o, bad.master = "";
  EXPECT_EQ(refused(bad), "--master") << "--nnodes 2 needs the master";
  bad = o, bad.master = "10.0.0.1";
  EXPECT_EQ(refused(bad), "--master") << "no port";
  bad = o, bad.master = "10.0.0.1:0";
  EXPECT_EQ(refused(bad), "--master");
  bad = o, bad.master = "10.0.0.1:http";
  EXPECT_EQ(refused(bad), "--master");
  bad = o, bad.backend = Backend::mpi;
  EXPECT_EQ(refused(bad), "--nnodes") << "mpi across hosts is mpirun's job";
  LaunchOptions one = o;
  one.nnodes = 1;
  EXPECT_EQ(refused(one), "") << "--nnodes 1 with --master: accepted (one Slurm recipe for 1 node and N), unused";
  one.master = "10.0.0.1";
  EXPECT_EQ(refused(one), "--master") << "but still checked";
  EXPECT_EQ(parse_master("[fe80::1]:29500"), (std::pair<std::string, int>{"fe80::1", 29500}));
  EXPECT_EQ(parse_master("node-0.cluster:1"), (std::pair<std::string, int>{"node-0.cluster", 1}));
}
