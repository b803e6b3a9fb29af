// `parity launch`: start the rank processes of a command, torchrun-style.
//
// Each rank is a separate process of `command` with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, PARITY_BACKEND, PARITY_COMM_TIMEOUT_MS and PARITY_STORE_DIR (a fresh
// per-run directory holding gloo's file store) in its environment; a rank process calls
// comm::make_world_communicator() to join. With backend mpi the launcher runs
// `mpirun -np N --oversubscribe --tag-output` instead, and the ranks read OMPI_COMM_WORLD_*.
//
// Output: every line a rank writes (stdout and stderr) is printed as "[r] line"; with
// log_dir each rank also writes log_dir/rank<r>.log, named in the failure summary.
// Failure: when a rank exits non-zero or dies, the others get `grace` to report their own
// error (they name the missing rank within the collective timeout), then SIGTERM, then
// SIGKILL after kill_after. SIGINT/SIGTERM to the launcher stops every rank the same way.
// The store directory is removed and every child reaped before launch_main returns.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace parity::comm {

struct LaunchOptions {
  int nproc = 1;                                        // -n, --nproc: number of ranks (>= 1)
  Backend backend = Backend::gloo;                      // --backend gloo|mpi|nccl
  std::chrono::milliseconds timeout = kDefaultTimeout;  // --timeout: per-collective timeout
  std::chrono::milliseconds grace{-1};                  // --grace: after the first failure (default timeout + 5 s)
  std::chrono::milliseconds kill_after{3000};           // SIGTERM -> SIGKILL delay
  std::string log_dir;                                  // --log-dir: per-rank logs (created if missing)
  bool prefix_output = true;                            // "[r] " before each rank's line (--no-prefix)
  std::string store_root;                               // parent of the store dir (default $TMPDIR or /tmp)
  std::string mpirun = "mpirun";                        // --mpirun: the mpirun to use for backend mpi
  std::vector<std::string> extra_env;                   // "NAME=value" added to every rank's environment
};

// Starts the ranks, waits for them, returns the verdict: 0 when every rank exited 0,
// else the first failing rank's exit code (128 + signal for a rank killed by a signal,
// 130/143 when the launcher itself was interrupted). Throws ConfigError for bad options
// (nproc < 1, empty command) before starting anything; never exits.
int launch_main(const LaunchOptions& opts, const std::vector<std::string>& command);

}  // namespace parity::comm
