// The simulated world (`--backend sim`, docs/comm.md "The simulated world"): every rank a
// thread of one process, every collective done in that process's memory, behind the same
// Communicator interface as gloo, mpi and nccl.
//
//   auto world = parity::comm::make_sim_world(64, timeout);     // the shared state, once
//   // in rank r's thread:
//   auto comm = parity::comm::make_sim_rank(world, r);           // its world communicator
//   ...                                                         // collectives, groups
//   parity::comm::sim_rank_ended(*world, r, code, error_text);   // always, when the thread ends
//
// Bits: every reduction is a left fold over the group's members in group-rank order (out =
// x0 op x1 op ... op x(W-1)), the order of gloo's shared-memory path on one host (comm/gloo/
// shm_communicator.cpp) and of the default reduce_scatter: the same bits as gloo for every op
// and size. Or, with SimOrder::ring (PARITY_SIM_ORDER=ring), the textbook ring's order that
// NCCL's ring algorithm follows: an all-reduce of n elements sums chunk c (ceil(n / W)
// elements) from member c + 1 around to member c, a reduce-scatter sums member j's block
// around the ring to j. Every member still gets the same bits, but an element's order depends
// on its offset and on n: two groups holding the same values at other offsets (uneven tensor
// -parallel shards before them) sum them differently, as NCCL's communicators do. The rest
// moves bytes. The last member to arrive does the whole collective for the
// group while the others wait (they hold no lock), so no input is copied through a buffer.
//
// Failures: a member that ends (returns or throws) while others wait for it fails their
// collective at once, named with its exit code or error; a member that never arrives (stuck
// in compute, or in another group's collective) fails the others' at their timeout, named with
// where it is. Members that call different collectives, or disagree on sizes, fail at once.
// sim_abort() fails every waiting and every later collective (the launcher's deadline).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace parity::comm {

// The most ranks one simulated world holds (a larger world is a ConfigError).
inline constexpr int kMaxSimRanks = 16384;

class SimWorld;

std::shared_ptr<SimWorld> make_sim_world(int world_size, std::chrono::milliseconds timeout);

// Rank `rank`'s world communicator (call it in the rank's own thread; groups from it as usual).
std::unique_ptr<Communicator> make_sim_rank(const std::shared_ptr<SimWorld>& world, int rank);

// The rank's thread is done: exit code and, for a failure, its error (named to the members that
// wait for it). Every rank must call it once, whatever happened.
void sim_rank_ended(SimWorld& world, int rank, int code, const std::string& error);

// A fault to see the failures named (PARITY_SIM_FAULT, read by the launcher): world rank `rank`,
// at its `at`-th collective (counted over all its groups, from 1), throws CommError (`stall`
// false) or never returns from computing (`stall` true: a rank stuck outside any collective).
// `late_ms` > 0 instead: the rank ends that many ms after its work is done (a rank slow to
// return, as 1024 threads on 2 loaded cores are; the launcher's own business, no collective's).
struct SimFault {
  int rank = -1;
  uint64_t at = 0;
  bool stall = false;
  uint64_t late_ms = 0;
};
// "throw@R:N", "stall@R:N" or "late@R:MS"; ConfigError naming PARITY_SIM_FAULT otherwise.
SimFault parse_sim_fault(const std::string& spec);
void set_sim_fault(SimWorld& world, const SimFault& f);

// The summation order of the world's reductions (see above): rank (the default) or ring;
// "rank" / "ring" (PARITY_SIM_ORDER, read by the launcher), ConfigError otherwise.
enum class SimOrder { rank, ring };
SimOrder parse_sim_order(const std::string& name);
void set_sim_order(SimWorld& world, SimOrder order);

// Every collective waiting now, and every later one, throws CommError with `why`.
void sim_abort(SimWorld& world, const std::string& why);

// "rank 3: in allreduce #12 of group{1,3}" / "rank 3: computing (last collective: ...)" /
// "rank 3: ended, exit 1" for a rank that has not ended by the launcher's grace.
std::string sim_rank_state(SimWorld& world, int rank);

}  // namespace parity::comm
