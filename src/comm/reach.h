// Whether the hosts of a world still answer, for a failure's diagnosis: a cut link (or a host
// that is down) is silence, and a collective timeout alone cannot tell it from a slow peer.
// Every peer on another host gets a TCP connect to its transport's listener (gloo's, whose
// address it published at rendezvous): an accepted or refused connection means its host
// answers; no answer within the timeout, or "network/host unreachable", means it does not.
// The connection is closed at once (gloo's listener drops a connection that sends no
// sequence number). All probes run at once: the whole takes at most `timeout`.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "comm/diagnose.h"

namespace parity::comm {

struct HostReach {
  std::string label;       // "vm (10.213.0.2)"
  std::vector<int> ranks;  // its ranks (world ranks), ascending
  bool reachable = true;
  std::string why;         // when not: "no answer within 1000 ms", "Network is unreachable"
};

// peers[i] is world rank ranks[i]; peers[me] is this process. Peers without a probe endpoint
// (PeerInfo::probe_port 0: mpi, nccl) and those on this host (the same address, or the same
// host name without one) are not probed. Returns the other hosts, probed.
std::vector<HostReach> probe_hosts(const std::vector<PeerInfo>& peers, const std::vector<int>& ranks, size_t me,
                                   std::chrono::milliseconds timeout);

// "host vm (10.213.0.2) is unreachable: ranks 4-7 (no answer within 1000 ms ...)" for each
// host that did not answer, "; "-joined; "" when every probed host answered.
std::string unreachable_sentence(const std::vector<HostReach>& hosts);

// "4-7", "1,3,5-6": ascending world ranks, runs folded.
std::string rank_ranges(const std::vector<int>& ranks);

}  // namespace parity::comm
