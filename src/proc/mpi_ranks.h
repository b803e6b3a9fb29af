// Backend mpi: the ranks are mpirun's children, not the launcher's, so the launcher cannot
// read their state when the first failure shows: by the time mpirun reports a rank that
// timed out (and exits), it has already torn the job down, sending every rank SIGCONT and
// SIGTERM, and a rank that was stopped (SIGSTOP, a debugger) is no longer in state T. So the
// launcher looks at mpirun's children while the job runs (MpiRankWatch::look, at most every
// kLookEvery) and keeps, for each rank, the last span it was seen stopped; when mpirun fails,
// a rank whose stop lasted until mpirun began tearing the job down is the one the others
// waited on (docs/faults.md "Blame under mpi").
#pragma once
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace parity::proc {

class MpiRankWatch {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kLookEvery{100};

  struct Stopped {
    int rank = -1;             // OMPI_COMM_WORLD_RANK
    pid_t pid = -1;
    std::chrono::milliseconds for_at_least{0};  // from the first look that saw it stopped to the last
  };

  explicit MpiRankWatch(pid_t mpirun) : mpirun_(mpirun) {}

  // One look at mpirun's children (their pids from /proc/MPIRUN/task/*/children, each one's rank
  // from its environment, its state from /proc/PID/stat), unless the last was under kLookEvery ago.
  void look(clock::time_point now);

  // The rank seen stopped in at least two looks in a row whose stop was still seen within
  // `slack` of `failed_at` (the first sign of the failure: a rank's error line, mpirun's
  // report or its exit), and before it; the one stopped longest when there are several.
  std::optional<Stopped> stopped_at(clock::time_point failed_at, std::chrono::milliseconds slack) const;

  // A rank still stopped at the last look whose stop has lasted at least `span`. Past
  // --timeout (and a second) every collective waiting on it has timed out, so if mpirun still
  // runs the others wait where no timeout applies (MPI_Init has none): the launcher ends it.
  std::optional<Stopped> stopped_longer_than(std::chrono::milliseconds span) const;

  // SIGKILL to every rank seen that still runs as the same process (pid and start time), not a
  // zombie: after mpirun has gone, none may be left (a stopped rank cannot notice it went).
  void kill_survivors() const;

 private:
  struct Seen {
    int rank = -1;
    std::string start;                   // its start time (/proc/PID/stat field 22): pid reuse
    int stopped_looks = 0;               // in a row, in the current or last stop
    clock::time_point stop_first{}, stop_last{}, last_running{};
  };
  pid_t mpirun_;
  clock::time_point last_look_{};
  std::map<pid_t, Seen> ranks_;
};

}  // namespace parity::proc
