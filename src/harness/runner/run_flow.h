// What `parity run SCENARIO` does with its request (docs/ckpt.md "Training runs" for the
// checkpoint flags): world 1 trains the baseline alone and prints each step's loss beside
// the data's entropy floor; world > 1 launches the layout's ranks (launch_run.h); a scenario
// with a "resume" object runs its save-and-resume-elsewhere check in two launches. Exit
// codes from core/exit_codes.h.
#pragma once
#include <cstdint>
#include <string>

#include "harness/runner/launch_run.h"
#include "harness/runner/run_request.h"

namespace parity {

// The request's own rules and what it will write, checked before anything runs: --save-at
// and --ckpt together and within the run; --ckpt a new, empty or parity's checkpoint
// directory; --report a new file or an earlier report (docs/faults.md "Nothing lost").
// ConfigError (exit 2). `source` names the scenario in messages.
void check_request(const RunRequest& r, const std::string& source);

// `r.scenario` may hold a resume object (the check runs when neither --save-at nor
// --resume is given). `every`: world 1 prints every K-th step.
int run_scenario(const RunRequest& r, const RankStart& how, const std::string& source, int64_t every);

// `mpirun -np 8 parity run S` without --as-rank would start 8 launchers of 8 ranks each:
// ConfigError when the environment already makes this process one rank of a larger world.
void refuse_nested_launch(const Scenario& s);

// "R.json" -> "R.phase1.json" (any other name: "R.phase1"): phase 1's report in a resume check.
std::string phase1_report(const std::string& report);

}  // namespace parity
