// Named bug injections: real bugs of the public record, compiled in at the exact place in
// src/parallel (and later src/optim, src/ckpt) where each class lives, off by default. A run
// turns them on with `parity run --inject NAME[,NAME]` (the environment variable
// PARITY_INJECT, which every rank inherits). The one-device baseline never consults them,
// so a verdict that misses an injected bug, or names the wrong root, is itself a bug.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace parity {

struct Injection {
  std::string_view name;
  std::string_view where;  // the file and the step it changes
  std::string_view bug;    // what goes wrong, and where it has happened publicly
};

// Every injection this build knows, in a fixed order.
const std::vector<Injection>& injections();
// Whether PARITY_INJECT names `name` (read once per process).
bool injected(std::string_view name);
// Checks PARITY_INJECT: throws ConfigError("--inject", ...) naming an unknown injection.
// Returns the names in it ("" when none), for reports.
std::string injected_names();

}  // namespace parity
