// Everything a scenario file fixes: the model, the optimizer, the layout (mesh/layout_config.h)
// and the run (steps, seeds, a save-and-resume check). In mesh/ because it is the lowest
// layer that knows a layout; harness/scenario/scenario.h reads and writes it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "mesh/layout_config.h"
#include "model/config.h"

namespace parity {

// A save-and-resume-elsewhere check (docs/scenario.md, "resume"): the run trains save_at
// steps under the scenario's layout and saves, then this layout loads the checkpoint and
// trains the remaining steps; both phases are compared with the uninterrupted baseline.
struct ResumeConfig {
  int64_t save_at = 0;
  LayoutConfig layout;
};

struct Scenario {
  std::string name;      // file stem unless given
  std::string source;    // path it was read from ("" when built in code)
  ModelConfig model;
  OptimConfig optim;
  LayoutConfig layout;
  int64_t steps = 10;
  uint64_t seed = 1234;       // parameter initialisation
  uint64_t data_seed = 5678;  // the Markov chain and the sequences drawn from it
  std::optional<ResumeConfig> resume;
  // The verdict's mode (docs/verdict.md "Step-local and trajectory"): false (the default,
  // `"verdict": "step-local"`): after each step is compared the layout continues from the
  // baseline's parameters and expert bias, so every step's error is one step's rounding;
  // true (`"verdict": "trajectory"`, `parity run --trajectory`): both run free.
  bool trajectory = false;
  // How many disjoint sets of twin_count() rounding twins measure the noise (harness/runner/twin.h): 1, or
  // twin_sets_again() (tolerance.h) when a failure at rounding level is measured again (docs/verdict.md
  // "Measured again"). Not a file key.
  int64_t twin_sets = 1;
};

}  // namespace parity
