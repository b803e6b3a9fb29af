#include "proc/launch_env.h"

#include <unistd.h>

#include <cstring>

#include "proc/leftovers.h"

extern char** environ;

namespace parity::proc {

using comm::Backend;

int global_rank(const LaunchOptions& o, int local) { return o.node_rank * o.nproc + local; }

std::vector<std::string> rank_env(const LaunchOptions& o, int local, const std::string& store,
                                  const std::string& mpi_shm) {
  static const char* ours[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
                               "PARITY_BACKEND=", "PARITY_COMM_TIMEOUT_MS=", "PARITY_STORE_DIR=",
                               "MASTER_ADDR=", "MASTER_PORT="};
  // An MPI process's own identity (a launcher started from inside an MPI job, or after an
  // MPI singleton init) must not leak into the ranks.
  static const char* mpi_identity[] = {"OMPI_COMM_WORLD_", "OMPI_UNIVERSE_SIZE=", "OMPI_MCA_ess",
                                       "OMPI_MCA_orte_", "OMPI_MCA_pmix", "PMIX_", "OMPI_FILE_LOCATION=",
                                       "OMPI_APP_CTX_", "OMPI_FIRST_RANKS=", "OMPI_NUM_APP_CTX="};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    bool replaced = false;
    for (const char* p : ours) replaced = replaced || std::strncmp(*e, p, std::strlen(p)) == 0;
    for (const char* p : mpi_identity) replaced = replaced || std::strncmp(*e, p, std::strlen(p)) == 0;
    if (!replaced) env.emplace_back(*e);
  }
  std::string n = std::to_string(o.nproc);
  env.push_back("PARITY_BACKEND=" + std::string(backend_name(o.backend)));
  env.push_back("PARITY_COMM_TIMEOUT_MS=" + std::to_string(o.timeout.count()));
  if (o.backend != Backend::mpi) {
    env.push_back("RANK=" + std::to_string(global_rank(o, local)));
    env.push_back("WORLD_SIZE=" + std::to_string(o.nnodes * o.nproc));
    env.push_back("LOCAL_RANK=" + std::to_string(local));
    env.push_back("LOCAL_WORLD_SIZE=" + n);
    if (o.nnodes > 1) {
      const auto [addr, port] = parse_master(o.master);
      env.push_back("MASTER_ADDR=" + addr);
      env.push_back("MASTER_PORT=" + std::to_string(port));
    } else {
      env.push_back("PARITY_STORE_DIR=" + store);
    }
  } else if (geteuid() == 0) {
    env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
    env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  }
  for (const auto& e : o.extra_env) env.push_back(e);
  if (o.backend == Backend::mpi) mpi_dirs_env(env, mpi_shm, store);
  return env;
}

std::vector<std::string> rank_argv(const LaunchOptions& o, const std::vector<std::string>& command) {
  if (o.backend != Backend::mpi) return command;
  std::vector<std::string> argv = {o.mpirun, "-np", std::to_string(o.nproc), "--oversubscribe"};
  if (o.prefix_output) argv.push_back("--tag-output");
  for (const char* v : {"PARITY_BACKEND", "PARITY_COMM_TIMEOUT_MS"}) {
    argv.push_back("-x");
    argv.push_back(v);
  }
  for (const auto& e : o.extra_env) {
    argv.push_back("-x");
    argv.push_back(e.substr(0, e.find('=')));
  }
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace parity::proc
