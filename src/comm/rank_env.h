// Who this rank process is, and how it meets the others, from its environment.
//
// Identity, first match wins (each source names the variables it read in its errors):
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE      torchrun's names (`parity launch`,
//                                                       torchrun-like launchers, Kubernetes)
//   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE   under mpirun
//   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE + SLURM_NODEID
//                                                       inside an srun job step (SLURM_STEP_ID
//                                                       set; a batch script itself is no rank)
//   none of them                                        a world of one
// Rendezvous (how a world of more than one meets), first match wins:
//   PARITY_STORE_DIR      gloo's file store in that directory (`parity launch`, one host)
//   PARITY_STORE=redis://HOST[:PORT][/RUN]   a Redis server (comm/redis_store.h); the run id
//                         (the URL's path, else PARITY_RUN_ID, else slurm-JOB.STEP in a Slurm
//                         step, else TORCHELASTIC_RUN_ID) namespaces the run's keys
//   TORCHELASTIC_USE_AGENT_STORE=True + MASTER_ADDR + MASTER_PORT   the store torchrun's agent
//                         serves there (comm/torch_store.h), keys under
//                         /parity/TORCHELASTIC_RUN_ID/attempt_TORCHELASTIC_RESTART_COUNT/;
//                         PARITY_TORCH_STORE=1|2 names its protocol (default: the agent's torch)
//   MASTER_ADDR + MASTER_PORT   a TCP store served by rank 0 on MASTER_ADDR:MASTER_PORT
//   under mpirun          blobs over MPI point-to-point messages (or the mpi backend itself)
//   Slurm without MASTER_ADDR   the TCP store on the first node of the step's node list
//                         (SLURM_STEP_NODELIST, else SLURM_NODELIST / SLURM_JOB_NODELIST),
//                         port MASTER_PORT, else 15000 + SLURM_JOB_ID % 10000
// Also: PARITY_BACKEND (gloo | mpi | nccl; default mpi under mpirun without a store dir,
// gloo otherwise), PARITY_COMM_TIMEOUT_MS (default 60000), PARITY_GLOO_HOST /
// PARITY_GLOO_IFACE (the address, or the interface whose address, gloo's TCP transport
// binds; see comm/world.h for the default).
// A missing or inconsistent value throws ConfigError naming the variable (exit 2).
#pragma once
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace parity::comm {

enum class RendezvousKind { local, file, tcp, mpi, redis, torch };

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string source = "none";        // "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID" or "none"
  Backend backend = Backend::gloo;
  RendezvousKind rendezvous = RendezvousKind::local;
  std::string store_dir;              // RendezvousKind::file
  std::string master_addr;            // RendezvousKind::tcp: rank 0's store; torch: the agent's
  int master_port = 0;
  std::string master_from;            // "MASTER_ADDR" or the Slurm node list variable
  std::string store_url;              // RendezvousKind::redis: PARITY_STORE, the run id as its path
  std::string store_prefix;           // RendezvousKind::torch: "/parity/RUN/attempt_N/"
  int torch_protocol = 0;             // RendezvousKind::torch: PARITY_TORCH_STORE, 0 = the agent's torch
  bool under_mpirun = false;
  std::chrono::milliseconds timeout = kDefaultTimeout;
};

// A variable's value, or nothing when unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// `backend`, when given, replaces PARITY_BACKEND (the layout's backend, `--backend`) before
// the rendezvous is chosen. Throws ConfigError naming the variable.
RankEnv parse_rank_env(const EnvLookup& env, std::optional<Backend> backend = std::nullopt);
RankEnv read_rank_env(std::optional<Backend> backend = std::nullopt);  // this process's environment

// The same variables read without read_rank_env's checks, for what must not throw: the rank
// to label an error with ("?" when none is set: RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, in
// read_rank_env's order), and the local rank (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID; `fallback` when none is set).
// In a thread that is a rank of a simulated world (ThreadRank below), both answer that rank.
std::string rank_label();
int local_rank_or(int fallback);

// This thread is rank `rank` of a simulated world (--backend sim) while the object lives: the
// environment's rank variables (the process's, shared by every thread) are not read for it.
class ThreadRank {
 public:
  explicit ThreadRank(int rank);
  ~ThreadRank();
  ThreadRank(const ThreadRank&) = delete;
  ThreadRank& operator=(const ThreadRank&) = delete;
};

// Slurm's compressed host lists: "node[1-3,5]" -> node1 node2 node3 node5, "gpu[08-10]" ->
// gpu08 gpu09 gpu10 (zero padding kept), "a,b[1-2],c" and "r[1-2]-n[1-2]" (every
// combination, left to right). Throws ConfigError naming `var` on a malformed list.
std::vector<std::string> parse_hostlist(const std::string& list, const std::string& var = "SLURM_NODELIST");

// SLURM_TASKS_PER_NODE: "2(x3),1" -> {2, 2, 2, 1}. Throws ConfigError naming `var`.
std::vector<int> parse_tasks_per_node(const std::string& s, const std::string& var = "SLURM_TASKS_PER_NODE");

}  // namespace parity::comm
