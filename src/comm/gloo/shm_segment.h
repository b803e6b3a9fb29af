// One shared-memory segment per group for the gloo backend's one-host path
// (comm/gloo/shm_communicator.h).
//
// Layout: a header, one control block per member (cache-line aligned: a step counter, the
// number of members sleeping on it, the byte counts of an alltoallv), then two data halves
// of `slot_bytes` per member. Collectives run as numbered steps that every member takes in
// the same order: a member writes its own half (step & 1), posts the step number, waits
// until every member has posted it, then reads the others' halves of that step. A member
// posts step s + 1 only after reading step s, so writing step s + 2 into the same half
// after waiting for step s + 1 never overwrites data a member still reads: one wait per
// step, no separate "done" round.
//
// Waiting: a short spin (only when the run's ranks on this host fit on its cores: a pair
// spinning among 8 ranks on 2 cores takes the core its partner needs), ten sched_yield, then
// a futex wait on the laggard's counter in slices of at most 50 ms; between slices the
// laggard's process is checked (same host: an exited member is named at once) and the
// collective's deadline. The poster wakes only when a member sleeps on its counter.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/diagnose.h"

namespace parity::comm::shm {

using clock = std::chrono::steady_clock;

struct alignas(64) RankControl {
  std::atomic<uint32_t> step;      // last step this member posted
  std::atomic<uint32_t> sleepers;  // members in a futex wait on `step`
};

class Segment {
 public:
  // Creates (owner: group rank 0) or opens the segment `name` ("/parity-..."); the size
  // follows from `members` and `slot_bytes`. `nonce` is written by the owner and checked
  // by the others (a segment of another run under the same name is refused).
  // host_ranks: the ranks of the run on this host (all of them share its cores), which
  // decides whether waiting spins (below), whatever the size of this group.
  static std::unique_ptr<Segment> create(const std::string& name, int members, int64_t slot_bytes, uint64_t nonce,
                                         int host_ranks);
  static std::unique_ptr<Segment> open(const std::string& name, int members, int64_t slot_bytes, uint64_t nonce,
                                       int host_ranks);
  // open() of a segment whose creator may not have made it yet: nullptr until it is ready.
  static std::unique_ptr<Segment> try_open(const std::string& name, int members, int64_t slot_bytes, uint64_t nonce,
                                           int host_ranks);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Removes the name (the mapping stays). Called by the owner once every member has posted
  // a step (so every member has mapped it), and on destruction; idempotent.
  void unlink();

  int members() const { return members_; }
  int64_t slot_bytes() const { return slot_bytes_; }
  char* slot(int rank, uint32_t step) const {
    return data_ + (static_cast<int64_t>(rank) * 2 + (step & 1u)) * slot_bytes_;
  }
  // alltoallv: the bytes member `rank` sends to each member in `step` (members entries).
  int64_t* send_bytes(int rank, uint32_t step) const;

  // The members' world ranks, for the messages ("rank 3 (group rank 1)"); unset: group ranks.
  void name_members(std::vector<int> world_ranks) { world_ranks_ = std::move(world_ranks); }

  void post(int rank, uint32_t step);
  // Waits until every member has posted `step`. Throws CommError naming the member that
  // did not (its process exited, or the deadline passed). peers: same order as members.
  void wait_all(int me, uint32_t step, clock::time_point deadline, std::chrono::milliseconds timeout,
                const std::vector<PeerInfo>& peers);

 private:
  Segment(std::string name, int members, int64_t slot_bytes, void* base, size_t bytes, bool owner, int host_ranks);
  static std::unique_ptr<Segment> open_impl(const std::string& name, int members, int64_t slot_bytes, uint64_t nonce,
                                            int host_ranks, bool early);
  void wait_one(int r, uint32_t step, clock::time_point deadline, std::chrono::milliseconds timeout,
                const PeerInfo& peer);
  RankControl& ctl(int r) const;
  std::string who(int r) const;

  std::string name_;
  int members_;
  int64_t slot_bytes_;
  void* base_;
  size_t bytes_;
  bool owner_;
  bool linked_;
  size_t ctl_stride_;
  char* ctl_base_;
  char* data_;
  int spin_iters_;
  int yields_;
  std::vector<int> world_ranks_;
};

// Bytes of each data half per member: PARITY_SHM_SLOT_BYTES, default 128 KiB (rounded to 64).
int64_t slot_bytes_setting();

}  // namespace parity::comm::shm
