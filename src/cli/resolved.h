// The launcher -> rank protocol: a launcher resolves the scenario (the file with every
// command-line override applied, checked once as a whole) and starts its ranks with that
// scenario written as a JSON file named on their command line. No value travels as argv
// text (a comment of run_cmd.cpp's once recorded why: --lr 1e-7 reached the ranks as 0), and
// the file replays by hand: `parity launch -n W -- parity run FILE --as-rank`.
#pragma once
#include <string>

#include "mesh/run_config.h"

namespace parity::cli {

class ResolvedScenario {
 public:
  // Writes `s` (scenario_to_json: every field, parse_scenario reads it back to the same
  // values). keep_dir empty: $TMPDIR/parity-run-<pid>-<n>.json, removed by the destructor
  // (and, after a kill -9, by a later launcher). Else keep_dir/scenario.json, kept.
  explicit ResolvedScenario(const Scenario& s, const std::string& keep_dir = "");
  ~ResolvedScenario();
  ResolvedScenario(const ResolvedScenario&) = delete;
  ResolvedScenario& operator=(const ResolvedScenario&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool keep_ = false;
};

// Removes $TMPDIR/<prefix><pid>-* whose <pid> is no running process: what a launcher killed
// by kill -9 could not remove ("parity-run-", "parity-baseline-").
void sweep_stale_temp(const std::string& prefix);

}  // namespace parity::cli
