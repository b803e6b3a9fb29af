// Scenario files: one JSON file fixes a model, an optimizer, a layout and a run
// (docs/scenario.md has the schema). Reading is strict: an unknown key, a wrong type or a
// value out of range is refused with one ConfigError that names the JSON path
// ("$.model.heads") and the rule; nothing is silently defaulted except a missing key.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/text.h"
#include "mesh/run_config.h"

namespace parity {

// What a scenario file may be (docs/scenario.md, "Limits"): checked by a linear scan before
// the JSON parser runs, so no file can exhaust the stack, the memory or the time of a reader.
inline constexpr JsonLimits kScenarioLimits{1 << 20, 32, 4096};  // bytes, nesting depth, string bytes
inline constexpr size_t kMaxNameBytes = 128;                       // $.name (it names files)
// $.steps and every --steps: 20000 times the shipped 50 (the fault tests run 10^6 steps as "runs
// until stopped"); 2^63 - 1 once ran until killed.
inline constexpr int64_t kMaxSteps = 1000000;

// Reads, parses and validates a scenario file. The name defaults to the file stem and
// Scenario::source is set to `path`. Errors name the file first:
// "scenarios/x.json: $.model.heads: must divide model.dim (16), got 3".
// Whether a parse checks the rules (validate_scenario) or leaves them to its caller, which
// validates once after its own changes (resolve_scenario: the command line's overrides; a
// rank's read_request, which keeps the ValidLayout).
enum class Rules { check, defer };
Scenario load_scenario(const std::string& path, Rules rules = Rules::check);

// The scenario files `paths` name: a file as given, a directory's *.json (top level only,
// sorted). ConfigError when a path does not exist or a directory holds no *.json.
std::vector<std::string> scenario_files(const std::vector<std::string>& paths);

// Checks kScenarioLimits, parses and validates the text of a scenario file (load_scenario
// without the file). Errors name the JSON path; "$" for the document as a whole.
Scenario parse_scenario_text(const std::string& text, const std::string& name, Rules rules = Rules::check);

// Parses and validates a JSON document already in memory. `name` is used when the document
// has no "name" key. Errors name the JSON path: "$.model.heads: ...".
Scenario parse_scenario(const nlohmann::json& j, const std::string& name, Rules rules = Rules::check);

// Every field, defaults included, in the schema's shape: parse_scenario(scenario_to_json(s),
// "") reproduces s (except Scenario::source, which is where a file was read from).
nlohmann::json scenario_to_json(const Scenario& s);

// What a checkpoint records of the run beside its model config (ckpt::CheckpointInfo::run,
// docs/ckpt.md "Identity"): everything else that decides the trajectory, i.e. seed,
// data_seed, precision and the optimizer with its settings (compared on resume), and the
// saving layout (recorded only). The steps done are the checkpoint's own step.
nlohmann::json checkpoint_run(const Scenario& s);

// Checks every range and cross-field rule of the schema (model sizes, optimizer
// hyper-parameters, layout degrees). Throws ConfigError naming the JSON path of the field.
ValidLayout validate_scenario(const Scenario& s);  // returns the main layout's proof

}  // namespace parity
