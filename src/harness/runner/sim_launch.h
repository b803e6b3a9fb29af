// The launch of a simulated world (`--backend sim`, docs/comm.md "The simulated world"): the
// request's ranks are threads of this process, joined through comm/sim/sim_world.h, each running
// the rank side of the one protocol (rank_main.h: run_sim_rank) with the host's one shared
// baseline. No process, store, port or /dev/shm segment: what bounds the world is memory and time.
//
// Per rank, what a process held that a thread shares: the environment (the rank's number and the
// baseline file are given, not read: comm::ThreadRank, VerdictOptions::baseline_file), the
// process-wide injection switches (core/inject.h: read once, the same for every rank, as they are
// the same in every rank process), the EP dispatch counters (per thread) and the output (rank 0
// alone prints, as under the process launcher). docs/comm.md lists what was checked.
#pragma once
#include <chrono>
#include <functional>
#include <string>

#include "harness/runner/run_request.h"

namespace parity {

struct SimLaunch {
  std::chrono::milliseconds timeout{60000};   // per collective
  std::chrono::milliseconds deadline{0};      // the whole launch (0: none)
  std::chrono::milliseconds grace{1000};      // after the first failure, for the others to end
  std::string baseline_file;                  // the shared baseline (empty: none)
  std::function<void()> after_start;          // once every rank's thread exists (the baseline's producer)
  double t0_s = 0;                            // the launch's start (unix seconds), for startup_s
};

// Refuses what a simulated world cannot do (ConfigError, exit 2): --nnodes, --log-dir, a CUDA
// device, a comm bench, a world over comm::kMaxSimRanks; and a malformed PARITY_SIM_FAULT
// (throw@RANK:N, stall@RANK:N, late@RANK:MS: comm/sim/sim_world.h SimFault).
void check_sim_request(const RunRequest& r);

// Runs the ranks and waits: 0 when every rank returned 0; else the first failing rank's code
// (3 when the deadline passed, or a rank did not return within `grace` of the first rank that
// ended broken: the process then ends at once with 3, since a thread cannot be killed). A
// verdict's FAIL (exit 1) is no broken end: the others are waited for as after a PASS.
int launch_sim(const RunRequest& r, const SimLaunch& how);

}  // namespace parity
