// What `parity launch` hands each rank process (proc/launch.h): its environment and its argv
// (the command itself, or mpirun's command line under backend mpi). Internal to the launcher.
#pragma once
#include <string>
#include <vector>

#include "proc/launch.h"

namespace parity::proc {

// A rank's global rank: this host's ranks follow those of the hosts before it.
int global_rank(const LaunchOptions& o, int local);

// The launcher's environment without any rank identity of its own, plus the rank's: RANK,
// WORLD_SIZE, ..., PARITY_STORE_DIR = `store` (one host) or MASTER_ADDR / MASTER_PORT; under
// mpi mpirun's, with OpenMPI's files pointed into `store` and `mpi_shm` (proc/leftovers.h).
std::vector<std::string> rank_env(const LaunchOptions& o, int local, const std::string& store,
                                  const std::string& mpi_shm);

// `command`, or under mpi: mpirun -np N --oversubscribe [--tag-output] -x ... command.
std::vector<std::string> rank_argv(const LaunchOptions& o, const std::vector<std::string>& command);

}  // namespace parity::proc
