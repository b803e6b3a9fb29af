// How the rank processes of a world meet: an exchange of small blobs among the members of a
// group, with a timeout that names the ranks that never arrived, and a board where a failed
// member posts a note the others read (comm/diagnose.h). Implementations: a key-value store
// polled by every member (gloo's FileStore in a per-run directory on one host, or the TCP
// store rank 0 serves, comm/tcp_store.h, on any number of hosts), and a bootstrap over MPI
// point-to-point messages (comm/mpi/). Which one a process uses: comm/rank_env.h.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/diagnose.h"
#include "comm/rank_env.h"

namespace parity::comm {

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

// A key-value store a rendezvous polls. Each call waits at most `op_timeout` for the store
// itself to answer (try_get does not wait for the key to appear); both throw CommError when
// the store cannot be reached.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value, std::chrono::milliseconds op_timeout) = 0;
  virtual std::optional<std::string> try_get(const std::string& key, std::chrono::milliseconds op_timeout) = 0;
  virtual std::string where() const = 0;  // "in /tmp/parity-rdzv-X", "at 10.0.0.1:29500 (rank 0)"
};

// Exchanges and boards over `store`. A board never throws: a note that cannot be posted or
// read (the store is unreachable: a cut link) reads as no note.
std::unique_ptr<Rendezvous> make_store_rendezvous(std::shared_ptr<KeyValueStore> store);

// A file store in `dir` (gloo's FileStore: one file per key, written then renamed).
std::unique_ptr<Rendezvous> make_file_rendezvous(const std::string& dir);

// A world of one: no store, nothing to wait for.
std::unique_ptr<Rendezvous> make_local_rendezvous();

// "world" -> "world", "group{0,2}" -> "g0_2": a scope usable in file names.
std::string scope_key(const std::vector<int>& members, int world_size);

}  // namespace parity::comm
