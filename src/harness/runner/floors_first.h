// Floors first (tolerance.h floors_first, docs/verdict.md "Floors first"): an fp64 or fp32 run is
// measured first without its rounding twin, every row held to its floor; only a run that fails there
// runs again with its twin, and that second verdict is the run's. A row's bound is the larger of its
// floor and the twin's measure, so a run within its floors passes whatever the twin would measure: the
// verdict is the twin's run's in every case, and a passing run saves the twin's work.
// Internal to harness/runner (verdict_run.cpp and the launcher's shared baseline).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "harness/runner/shared_baseline.h"
#include "harness/verdict/verdict.h"
#include "mesh/run_config.h"

namespace parity {

// PARITY_FLOORS_FIRST: 1 (the default) or 0 (every run measures its twin); anything else a ConfigError.
bool floors_first_enabled();

// The twin sets of a run's first measurement: 0 (no twin) where floors first holds for its precision
// and is enabled, else s.twin_sets. The launcher's shared baseline and every rank ask alike.
int64_t first_twin_sets(const Scenario& s);

// Collective. Whether a run measured without its twin (rank 0's rows decide) failed a row, and what
// the report says of its second measurement (rank 0's; "" elsewhere).
std::pair<bool, std::string> floors_failed(comm::Communicator& world, const VerdictReport& rep,
                                           const std::vector<Row>& rows);

// Collective. The second measurement's baseline where the first read its host's shared one (`path`,
// this rank reading slot `slot`): the reader of slot 0 trains it, twin and all, into path + ".twins"
// in a thread of its own for the same readers (returned: alive until every rank has read its last
// step); `file` is what every rank then reads. "" (every rank trains its own) without a shared first.
std::unique_ptr<BaselineProducer> share_second(comm::Communicator& world, const Scenario& s,
                                               const std::string& path, int slot, std::string& file);

}  // namespace parity
