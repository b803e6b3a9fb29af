// Named bug injections: real bugs of the public record, compiled in at the exact place in
// src/parallel (and later src/optim, src/ckpt) where each class lives, off by default. A run
// turns them on with `parity run --inject NAME[,NAME]` (the environment variable
// PARITY_INJECT, which every rank inherits). The one-device baseline never consults them,
// so a verdict that misses an injected bug, or names the wrong root, is itself a bug.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace parity {

struct Injection {
  std::string_view name;
  std::string_view where;     // the file and the step it changes
  std::string_view bug;       // what goes wrong
  // What must catch it (`parity zoo`): a scenario in scenarios/, and the root the verdict
  // must name there: "quantity subject" as the root line prints it, the step, and a part of
  // the factor's reading ("" when any). Root and factor may list alternatives, "A|B": under a
  // 16-bit policy a change within the loss's bound first shows in the gradients.
  std::string_view scenario;
  std::string_view root;
  int64_t step;
  std::string_view factor;
};

// Every injection this build knows, in a fixed order.
const std::vector<Injection>& injections();
// The injection called `name`; ConfigError("--inject", ...) listing the known ones if none.
const Injection& find_injection(std::string_view name);
// Whether this process's injections name `name`: the run request's (set_injected), else
// PARITY_INJECT (read once per process).
bool injected(std::string_view name);
// Checks this process's injections (the request's, else PARITY_INJECT): throws
// ConfigError("--inject", ...) naming an unknown one. Returns the names ("" when none),
// comma-separated, for reports and for the run request.
std::string injected_names();
// A rank's injections, as its run request names them ("a,b"; "" none): they replace
// PARITY_INJECT for this process, so a request replays an injected run. Throws as
// injected_names for an unknown name. Called by the rank side before anything runs.
void set_injected(const std::string& names);

}  // namespace parity
