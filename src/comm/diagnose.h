// Naming the rank that is missing after a failed collective.
//
// When a collective times out or loses a connection, the failing rank posts a note
// ("allreduce #12") on a board every member can read (the rendezvous store for gloo,
// a control communicator for mpi), then looks at every other member for a short window:
// a member that posted a note failed too (a victim, or in another collective: a
// mismatch); a member whose process has exited (same host, checked by pid) crashed or
// left early; a member that is alive and silent never reached the collective.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace parity::comm {

struct PeerInfo {
  std::string host;
  int64_t pid = 0;
  std::string addr;  // the address its transport listens on, when not loopback ("" otherwise)
  // Its transport's listener, for a reachability probe (comm/reach.h); not serialised: each
  // rank reads it from the transport address the peer published (gloo), 0 where none (mpi).
  std::string probe_host;
  int probe_port = 0;
};

std::string local_host();
PeerInfo local_peer(const std::string& addr = "");
// True only when the peer is on this host and its process is gone (or a zombie).
bool peer_exited(const PeerInfo& p);
// The fields of /proc/<pid>/stat after "(comm)": [0] the state letter, [19] the start time
// (field 22); empty when the process is gone or unreadable. The one reader of that file.
std::vector<std::string> proc_stat_fields(int64_t pid);

// Serialised as "host\npid" or "host\npid\naddr".
std::string encode_peer(const PeerInfo& p);
PeerInfo decode_peer(const std::string& s);

class FailureBoard {
 public:
  virtual ~FailureBoard() = default;
  virtual void post(const std::string& note) = 0;
  // The note posted by this group rank, if any has arrived.
  virtual std::optional<std::string> read(int group_rank) = 0;
};

// Posts `what` and returns a sentence naming the missing member(s), e.g.
// "missing rank 3 (pid 812 on host h has exited)" ("on host h (10.0.0.2)" when the peer
// published an address: ranks on hosts that share a name, network namespaces). members: world ranks in group order;
// peers: the same order.
// world: a board every rank of the world reads, keyed by world rank, for a sub-group's
// failure: a member of this group that is silent here but failed in another group's
// collective is named as stuck there, with what its own diagnosis found ("missing rank 1
// (pid 812 on h (10.0.0.1) is stuck in group{1,3} allreduce #9: missing rank 3 (...))"):
// across sub-groups the member a rank waits for is often a victim, on a host that is up.
// world_peers (by world rank), when given: before naming the missing member, every peer on
// another host is probed (comm/reach.h) for at most min(window, 1 s), in parallel with the
// board; a host that does not answer is named first with all its ranks ("host vm (10.0.0.2)
// is unreachable: ranks 4-7 (...); missing rank 4 (...)"), and the window ends as soon as
// every member still silent is on such a host.
struct WorldBoard {
  FailureBoard* board = nullptr;  // none: only this group's board
  std::string group;              // this group's name, "group{0,2}"
  const std::vector<PeerInfo>* world_peers = nullptr;
};

std::string name_missing(int my_group_rank, const std::vector<int>& members,
                         const std::vector<PeerInfo>& peers, FailureBoard& board,
                         const std::string& what, std::chrono::milliseconds window,
                         const WorldBoard& world = {});

}  // namespace parity::comm
