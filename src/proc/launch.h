// `parity launch`: start the rank processes of a command, torchrun-style.
//
// Each rank is a separate process of `command` with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, PARITY_BACKEND, PARITY_COMM_TIMEOUT_MS and PARITY_STORE_DIR (a fresh
// per-run directory holding gloo's file store) in its environment; a rank process calls
// comm::make_world_communicator() to join. With backend mpi the launcher runs
// `mpirun -np N --oversubscribe --tag-output` instead, and the ranks read OMPI_COMM_WORLD_*.
//
// Across hosts: with nnodes > 1 one launcher runs on each host (node_rank 0..nnodes-1), each
// starting its nproc local ranks with RANK = node_rank * nproc + local rank, WORLD_SIZE =
// nnodes * nproc, LOCAL_RANK, LOCAL_WORLD_SIZE = nproc and MASTER_ADDR / MASTER_PORT from
// `master` instead of a store directory: rank 0 (on node 0) serves the TCP store there
// (comm/tcp_store.h). Each launcher watches only its own ranks; a rank on another host that
// fails makes the local ones fail their collective, and this launcher ends as usual.
//
// Output: every line a rank writes (stdout and stderr) is printed as "[r] line"; with
// log_dir each rank also writes log_dir/rank<r>.log, named in the failure summary.
// Failure: when a rank exits non-zero or dies, the others get `grace` to report their own
// error (they name the missing rank and the collective), then SIGTERM (with SIGCONT, so a
// stopped rank acts on it), then SIGKILL after kill_after; a rank still running then is
// named as the one that did not answer, with its /proc state. SIGINT/SIGTERM to the
// launcher stops every rank the same way; so does the wall-clock `deadline`.
// The store directory is removed and every child reaped before launch_main returns.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace parity::proc {

// After the first rank fails (dies, exits non-zero, or names a peer that did not answer),
// the others get this long to print their own view before they are stopped: the cause is
// known by then, so a run ends within about a second of a death or a collective timeout.
inline constexpr std::chrono::milliseconds kDefaultGrace{1000};

// The per-host cap: ranks one launcher starts on one host (`parity launch -n`, a scenario's
// $.layout.world over --nnodes hosts); the shared baseline has as many reader slots
// (harness/runner/shared_baseline.cpp). Above it a launch is refused with exit 2, never clamped.
inline constexpr int kMaxRanksPerHost = 256;

struct LaunchOptions {
  int nproc = 1;                                        // -n, --nproc: ranks on this host, [1, kMaxRanksPerHost]
  comm::Backend backend = comm::Backend::gloo;          // --backend gloo|mpi|nccl
  std::chrono::milliseconds timeout = comm::kDefaultTimeout;  // --timeout: per-collective timeout
  std::chrono::milliseconds grace{-1};                  // --grace: after the first failure (default kDefaultGrace)
  std::chrono::milliseconds kill_after{2000};           // SIGTERM -> SIGKILL delay
  std::chrono::milliseconds deadline{0};                // --deadline: wall clock for the whole run (0: none)
  std::string log_dir;                                  // --log-dir: per-rank logs (created if missing)
  bool prefix_output = true;                            // "[r] " before each rank's line (--no-prefix)
  std::string store_root;                               // parent of the store dir (default $TMPDIR or /tmp)
  std::string mpirun = "mpirun";                        // --mpirun: the mpirun to use for backend mpi
  std::vector<std::string> extra_env;                   // "NAME=value" added to every rank's environment
  int nnodes = 1;                                       // --nnodes: hosts, one launcher on each
  int node_rank = 0;                                    // --node-rank: this host's index in [0, nnodes)
  std::string master;                                   // --master ADDR:PORT: rank 0's TCP store (nnodes > 1)
  // Set: each rank is started by fork alone and runs in_process(the rank's argv) in the
  // child, its environment the rank's, its name "parity-rank<R>" (ps, pgrep -x); the
  // launcher must have no other thread then. The child has what the launcher loaded and
  // checked already, so a rank starts in about a millisecond instead of an exec and a
  // dynamic load (about 3.6 ms of CPU each here). Unset: fork + exec of the command.
  // Not with backend mpi (mpirun starts the ranks).
  std::function<int(const std::vector<std::string>& argv)> in_process;
  // Called once every rank has started (work that must not run before a fork).
  std::function<void()> after_start;
};

// "10.0.0.1:29500" or "[fe80::1]:29500" -> {addr, port}; ConfigError naming --master.
std::pair<std::string, int> parse_master(const std::string& s);

// Starts the ranks (nproc of them: with nnodes > 1, this host's share), waits for them, returns the verdict
// (core/exit_codes.h): 0 when every rank exited 0; 3 (infrastructure failed) when a rank died by a signal or the
// deadline passed; else the first failing rank's exit code; 130/143 when the launcher itself was interrupted. Under mpi
// the rank mpirun names as the first to fail is the one reported. Throws ConfigError for bad options (nproc < 1, empty
// command) before starting anything; never exits.
int launch_main(const LaunchOptions& opts, const std::vector<std::string>& command);

}  // namespace parity::proc
