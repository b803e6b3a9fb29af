// The golden commands' jobs (docs/golden.md): `update` runs each scenario (50 steps) and pins
// its curves in golden/<the scenario file's name>.json; `check` reruns it and compares with the pinned curves,
// printing the values that differ. The baseline runs in this process; for layout.world > 1
// the layout's ranks run through the one launch (harness/runner/launch_run.h, job curves).
// Exit: 0 every scenario matches (or was written), 1 a golden differs, is missing or stale,
// 2 bad input (the worst over the scenarios).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "harness/golden/golden.h"
#include "harness/runner/launch_run.h"

namespace parity {

struct GoldenOptions {
  std::vector<std::string> scenarios;
  std::string dir;      // where golden files live ("" = <scenario dir>/../golden)
  std::string backend;  // override of layout.backend
  int64_t steps = kGoldenSteps;
  double timeout_s = 120;
  int max_lines = 20;  // check: differing values printed per scenario
  bool perf = true;    // check: compare time and memory with the golden's (--no-perf: not)
  std::string perf_out;  // check of one scenario: write its PerfShare here (golden.h), for a parent's total
  RankStart start;     // how the layout's ranks start this binary
};

int golden_update(const GoldenOptions& o);
int golden_check(const GoldenOptions& o);

}  // namespace parity
