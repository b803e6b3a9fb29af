// Where the layout's time goes: a Communicator that forwards every collective to the real
// one and adds the time spent inside it (waiting for the slowest peer included) to a clock.
// The verdict hands it to ParallelRun, so the layout's compute and its communication are
// reported apart without touching the parallel code.
#pragma once
#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "harness/verdict/verdict.h"

namespace parity {

struct CommClock {
  double seconds = 0;  // inside collectives of the wrapped world and its groups
  int64_t calls = 0;
  // The process's CPU seconds inside them: a rank waiting for a peer spins (MPI polls), so on a
  // loaded machine most of a rank's CPU time can be waiting; the golden's perf leaves it out.
  double cpu_seconds = 0;
};

// `inner` must outlive the result; groups made from the result are timed too and forward
// to inner.group(...) of the same ranks.
std::unique_ptr<comm::Communicator> timed_communicator(comm::Communicator& inner, std::shared_ptr<CommClock> clock);

// Collective: every rank's timings gathered into rep (rank 0's and, per field, the slowest).
void gather_timings(comm::Communicator& world, const Timings& mine, VerdictReport& rep);

}  // namespace parity
