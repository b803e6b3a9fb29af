// The PARITY_* settings read from the environment, in one table: each name with its default
// and what it does, printed by `parity help env`. What a rank needs to replay a run (the
// named bugs, the fault, the launch clock, the shared baseline file) is not here: it travels
// in the run request (harness/runner/run_request.h); PARITY_INJECT and PARITY_FAULT are here
// as what a user sets on the launcher side.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace parity {

struct Knob {
  std::string_view name;      // "PARITY_COMM_TIMEOUT_MS"
  std::string_view fallback;  // the value when unset, in words ("60000", "unset: none")
  std::string_view what;      // one line
};

// Every setting, by area (verdict, launch, communication, checkpoints), in a fixed order.
const std::vector<Knob>& knobs();

// The environment's value of the setting `name` (nullptr when unset). `name` must be a row of
// knobs(): a name outside the table throws std::logic_error, so no setting escapes it.
const char* knob(std::string_view name);

// A setting that is on unless it is 0: true unset or "1", false "0"; anything else a ConfigError naming it.
bool knob_on(std::string_view name);

// The table as `parity help env` prints it: a header line, then one line per setting.
std::string knobs_text();

}  // namespace parity
