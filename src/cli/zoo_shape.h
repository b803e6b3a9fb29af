// What each bug of the zoo needs of a shape (`parity zoo --set DIR`, docs/zoo.md "The zoo over a
// scenario set"). The registry (core/inject.h) names one shipped scenario per bug; run over another
// set, every (bug, scenario) pair is either run and judged, or listed as "cannot act in this shape"
// with the reason: the part of the layout, model or optimizer the bug's code needs and the scenario
// lacks. Never a silent skip: a pair claimed "cannot act" can itself be run (--check-cannot), and
// must then pass, since a bug that cannot act changes nothing.
#pragma once
#include <string>
#include <string_view>

#include "core/inject.h"
#include "mesh/run_config.h"

namespace parity::cli {

// Why `bug` cannot act in scenario s, as "needs X (here Y)" clauses joined by "; "; "" when it
// can. s is the scenario as the run would see it (a --precision override applied).
// ConfigError when the bug has no entry (every injection must have one: tests/cli).
std::string zoo_cannot_act(const Injection& bug, const Scenario& s);

// The factor the bug's root must name in s: the registry's for its shipped shape, with the
// numbers that follow the shape replaced by s's ("1/4 (= 1/dp)" -> "(= 1/dp)": the verdict names
// a degree only when the ratio equals that degree of this shape; "layernorm x2" -> "layernorm x8"
// at tp 8). Alternatives "A|B" as in the registry.
std::string zoo_factor_in(const Injection& bug, const Scenario& s);

// The root the bug's run must name in s ("quantity subject", alternatives "A|B"): the registry's,
// or where the first quantity it changes depends on the shape, the alternatives.
std::string zoo_root_in(const Injection& bug, const Scenario& s);

// The step the bug's root must name in s: the registry's, or for a bug of the checkpoint (it acts
// in a resume check's phase 2) the step s resumes at (its save_at).
int64_t zoo_step_in(const Injection& bug, const Scenario& s);

// Whether `bug` acts only under some precision policies (fp16's scaler, fp8's scales, a 16-bit compute
// copy): under `parity zoo --precision P` its needs decide whether it can act in its registry scenario.
bool zoo_policy_bound(const Injection& bug);
// Whether `bug` has an entry here (the unit test asks it of every injection).
bool zoo_shape_known(std::string_view bug);

}  // namespace parity::cli
