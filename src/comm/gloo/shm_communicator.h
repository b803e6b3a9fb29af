// The gloo backend's path for ranks on one host: every collective through one shared-memory
// segment per group (comm/gloo/shm_segment.h) instead of Gloo's TCP pairs, whose every
// message wakes a transport thread and then the waiting rank (docs/comm.md).
//
// The same interface, the same backend name ("[gloo]" in every message), the same
// rendezvous and failure boards: a missing member is named exactly as on TCP. The bits are
// the gloo path's: allreduce reduces every element in group-rank order (the direct round's
// order, now at every size), reduce_scatter in group-rank order on the owner, the rest
// moves data. On by default when every rank is on this host (world.cpp decides);
// PARITY_GLOO_SHM=0 keeps TCP.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/rendezvous.h"

namespace parity::comm {

// False when PARITY_GLOO_SHM is "0".
bool gloo_shm_enabled();

// The failure diagnosis of both gloo paths: posts `what` on the group's board (and the
// world's "anygroup" board) and names the missing member (comm/diagnose.h). world_peers (by
// world rank), when given, are probed for unreachable hosts first (TCP across hosts; the
// shared-memory path has every rank on this host and passes none).
std::string diagnose_on_boards(Rendezvous& rdzv, const std::string& scope, const Communicator& c, int world_size,
                               const std::vector<PeerInfo>& peers, const std::string& what,
                               const std::vector<PeerInfo>* world_peers = nullptr);

// Removes the segment names a process `pid` created ("/dev/shm/parity-PID-..."); the
// launcher calls it for every rank it started, once the rank has ended.
void remove_shm_segments_of(int64_t pid);

// Removes every "/dev/shm/parity-PID-..." whose PID (the rank that created it) no longer runs:
// a name lives only while its group starts (every member maps it, then rank 0 unlinks it), so
// once its creator is gone nobody can still need the name. What a launcher killed by -9 (its
// ranks die with it) or a rank killed during start-up leaves; the next launch sweeps it. A
// reused pid keeps a name until that process ends too (never one in use removed).
// Returns how many were removed.
int remove_stale_shm_segments();

std::unique_ptr<Communicator> make_shm_world(int rank, int world_size, std::shared_ptr<Rendezvous> rendezvous,
                                             std::chrono::milliseconds timeout);

}  // namespace parity::comm
