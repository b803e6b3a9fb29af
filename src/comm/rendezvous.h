// How a rank process finds out who it is and meets the others.
//
// Environment (set by `parity launch`, or by mpirun for the OMPI_COMM_WORLD_* part):
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE   torchrun's names
//   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE   used when RANK is unset
//   PARITY_BACKEND        gloo | mpi | nccl (default: mpi under mpirun, gloo otherwise)
//   PARITY_STORE_DIR      per-run directory of the file store (gloo/nccl rendezvous on one host)
//   PARITY_COMM_TIMEOUT_MS  collective timeout (default 60000)
//   PARITY_GLOO_HOST      address the gloo TCP transport binds (default 127.0.0.1 on one
//                         host; the host name when ranks span hosts under mpirun)
// A process with none of these is a world of one.
//
// Rendezvous: an exchange of small blobs among the members of a group, with a timeout
// that names the ranks that never arrived. Two implementations: a file store in a
// per-run directory (one host), and a bootstrap over MPI point-to-point messages (any
// number of hosts, for gloo or nccl started by mpirun).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/diagnose.h"

namespace parity::comm {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  Backend backend = Backend::gloo;
  std::string store_dir;              // empty: no file store
  bool under_mpirun = false;
  std::chrono::milliseconds timeout = kDefaultTimeout;
};

RankEnv read_rank_env();  // throws ConfigError naming the variable

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  // Every member (world ranks `members`, this process at `group_rank`) contributes
  // `mine` for `scope`; returns the blobs in group order. Throws CommError naming the
  // members that did not arrive within `timeout`.
  virtual std::vector<std::string> exchange(const std::string& scope, const std::vector<int>& members,
                                            int group_rank, const std::string& mine,
                                            std::chrono::milliseconds timeout) = 0;
  // Notes about a failure in `scope`, visible to every member.
  virtual std::unique_ptr<FailureBoard> board(const std::string& scope,
                                              const std::vector<int>& members, int group_rank) = 0;
};

// A file store in `dir` (gloo's FileStore: one file per key, written then renamed).
std::unique_ptr<Rendezvous> make_file_rendezvous(const std::string& dir);

// A world of one: no store, nothing to wait for.
std::unique_ptr<Rendezvous> make_local_rendezvous();

// "world" -> "world", "group{0,2}" -> "g0_2": a scope usable in file names.
std::string scope_key(const std::vector<int>& members, int world_size);

}  // namespace parity::comm
