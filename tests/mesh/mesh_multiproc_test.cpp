// redistribute across real ranks: mesh_worker under proc::launch_main (gloo), every rank
// running the same RapidCheck cases. The mpi backend runs under mpirun (mesh_tests.cmake).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "proc/launch.h"

namespace parity::mesh {
namespace {

struct Launched {
  int code = -1;
  std::string rank0_log;
};

Launched launch(int n, int cases) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "parity-mesh-test-XXXXXX").string();
  const std::string root = mkdtemp(tmpl.data());
  proc::LaunchOptions o;
  o.nproc = n;
  o.backend = comm::Backend::gloo;
  o.timeout = std::chrono::seconds(30);
  o.log_dir = root + "/logs";
  o.store_root = root + "/store";
  o.mpirun = PARITY_MPIRUN;
  std::filesystem::create_directories(o.store_root);
  Launched r;
  r.code = proc::launch_main(o, {PARITY_MESH_WORKER, "props", std::to_string(cases)});
  std::ifstream log(o.log_dir + "/rank0.log");
  std::stringstream ss;
  ss << log.rdbuf();
  r.rank0_log = ss.str();
  std::filesystem::remove_all(root);
  return r;
}

TEST(RedistributeAcrossRanks, GlooWorld4) {
  const Launched r = launch(4, 40);
  EXPECT_EQ(r.code, 0) << r.rank0_log;
  EXPECT_NE(r.rank0_log.find("OK, passed 40 tests"), std::string::npos) << r.rank0_log;
}

TEST(RedistributeAcrossRanks, GlooWorld8) {
  const Launched r = launch(8, 25);
  EXPECT_EQ(r.code, 0) << r.rank0_log;
  EXPECT_NE(r.rank0_log.find("OK, passed 25 tests"), std::string::npos) << r.rank0_log;
}

}  // namespace
}  // namespace parity::mesh
