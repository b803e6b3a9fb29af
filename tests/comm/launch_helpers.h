// Helpers for test_comm: run comm_worker under proc::launch_main in a scratch directory
// and collect what the ranks wrote.
#pragma once
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "proc/launch.h"

namespace parity::comm::testing {

using namespace parity::proc;

struct LaunchResult {
  int code = -1;
  double seconds = 0;
  std::vector<std::string> logs;  // per rank (one mpirun.log for backend mpi)
  int store_entries_left = 0;     // files or directories left under the store root
  int children_left = 0;          // child processes the launch left behind
  std::string all() const {
    std::string s;
    for (size_t i = 0; i < logs.size(); ++i) s += "--- log " + std::to_string(i) + "\n" + logs[i];
    return s;
  }
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Pids of this process's children (zombies included). An MPI singleton init in this
// process leaves its own helper child, so tests compare before and after a launch.
inline std::set<int> child_pids() {
  std::set<int> pids;
  std::string me = std::to_string(getpid());
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string status = read_file(e.path().string() + "/status");
    auto p = status.find("PPid:\t");
    if (p != std::string::npos && status.substr(p + 6, status.find('\n', p) - p - 6) == me)
      pids.insert(std::atoi(e.path().filename().c_str()));
  }
  return pids;
}

inline LaunchResult run_worker(Backend backend, int n, const std::vector<std::string>& args,
                               std::chrono::milliseconds timeout = std::chrono::seconds(30),
                               std::chrono::milliseconds grace = std::chrono::milliseconds(-1),
                               const std::vector<std::string>& extra_env = {}) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "parity-comm-test-XXXXXX").string();
  std::string root = mkdtemp(tmpl.data());
  LaunchOptions o;
  o.nproc = n;
  o.backend = backend;
  o.timeout = timeout;
  o.grace = grace;
  o.log_dir = root + "/logs";
  o.store_root = root + "/store";
  o.mpirun = PARITY_MPIRUN;
  o.extra_env = extra_env;
  std::filesystem::create_directories(o.store_root);
  std::vector<std::string> cmd = {PARITY_COMM_WORKER};
  cmd.insert(cmd.end(), args.begin(), args.end());
  auto before = child_pids();
  auto t0 = std::chrono::steady_clock::now();
  LaunchResult r;
  r.code = launch_main(o, cmd);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int pid : child_pids()) r.children_left += !before.count(pid);
  if (backend == Backend::mpi) {
    r.logs.push_back(read_file(o.log_dir + "/mpirun.log"));
  } else {
    for (int i = 0; i < n; ++i) r.logs.push_back(read_file(o.log_dir + "/rank" + std::to_string(i) + ".log"));
  }
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(o.store_root)) ++r.store_entries_left;
  std::filesystem::remove_all(root);
  return r;
}

}  // namespace parity::comm::testing
