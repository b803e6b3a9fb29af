// The verdict's step loop (harness/verdict/verdict.h says what is compared): in every rank
// the one-device baseline (harness/runner/baseline.h, shared per host) and the layout's
// ParallelRun step side by side, one allgather of every group's sums per step, rows folded
// over the steps into a VerdictReport. The process side (the environment's PARITY_FAULT,
// the world communicator, timings across ranks) lives here, not in harness/verdict/.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "mesh/layout_config.h"
#include "harness/verdict/verdict.h"
#include "mesh/run_config.h"

namespace parity {

struct VerdictOptions {
  std::optional<Fault> fault;
  double startup_s = 0;     // measured by the caller (launcher start to verdict entry)
  double rendezvous_s = 0;  // measured by the caller (make_world_communicator)
  // Checkpoints (docs/ckpt.md, "Training runs"). save_at >= 0: the layout saves its whole
  // state into ckpt_dir when save_at steps are done, and goes on. resume_dir: the layout
  // loads its state from there (any saved layout or world) and runs from the saved step K;
  // the baseline replays steps 0..K-1 without comparing, so steps K.. are compared with the
  // uninterrupted baseline. save_at must lie in [K, steps] (ConfigError).
  int64_t save_at = -1;
  std::string ckpt_dir, resume_dir;
  std::string baseline_file;  // the host's shared baseline (the run request's); "": train our own
  const ValidLayout* valid = nullptr;  // the request's proof that the layout met the rules (ParallelRun)
  bool trace = false;  // --trace: trace the first failing step, or step 0 of a passing run (trace_run.h)
  // A resume check's carry (verdict_carry.h): phase 1 writes it when it saves, phase 2 reads it
  // at its first step. "": none (a user's --save / --resume, each run judged on its own).
  std::string carry_dir;
};

// PARITY_MEASURE_AGAIN (docs/verdict.md "Measured again"): whether a verdict failing at rounding level is
// measured again with twice the twins (1, the default) or not (0); anything else is a ConfigError.
bool measure_again_enabled();

// Collective over `world` (every rank calls it). Throws ConfigError when the layout cannot
// run the model, CommError when a rank fails.
template <class T>
VerdictReport run_verdict(const Scenario& s, comm::Communicator& world, const VerdictOptions& o = {});

}  // namespace parity
