// The rank side of the one run protocol (run_request.h): join the world that started this
// process (`parity launch`, mpirun, srun or a torchrun-like launcher: comm/rank_env.h) and
// do the request's job. A verdict: rank 0 prints the table and writes the report, every rank
// returns the verdict's exit code. Curves: rank 0 writes the layout's golden curves. A comm
// bench: rank 0 prints the table. Errors are printed here, prefixed with the rank
// ("parity: rank R: error: ..."), and mapped to the one exit-code table (core/exit_codes.h).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "harness/runner/run_request.h"
#include "harness/verdict/verdict.h"

namespace parity {

// `request` reads or builds the request (its errors are the rank's too); `source` names it
// in messages (the file, or the scenario of `parity run --as-rank`).
int run_rank(const std::function<RunRequest()>& request, const std::string& source);

// A rank of a simulated world (--backend sim, sim_launch.h): run in its own thread, it joins
// through `join` (comm/sim/sim_world.h) instead of the environment, and reads the shared baseline
// from `baseline_file`. The same jobs, messages and exit codes as run_rank; `error` gets the
// message of a failure (named to the ranks waiting for this one).
struct SimRankSide {
  int rank = 0;
  std::function<std::unique_ptr<comm::Communicator>()> join;
  double startup_s = 0;
  std::string baseline_file;
};
int run_sim_rank(const RunRequest& r, const SimRankSide& sim, std::string& error);

// The fault named by the environment variable PARITY_FAULT, if set and non-empty (parse_fault:
// ConfigError on a malformed spec).
std::optional<Fault> fault_from_env();

}  // namespace parity
