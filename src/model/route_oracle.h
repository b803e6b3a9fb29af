// Near-tie arbitration (issue 24, docs/verdict.md "Routing"). A token's top-k choice can differ
// between a layout and the one-device baseline only because their scores differ by rounding:
// two experts' selection values (s + bias) within the rounding noise of each other. Left
// alone, such a token takes other experts, the gradients of four experts change by a whole
// token, and the rest of the run diverges for no bug. With an oracle, a run follows the
// baseline's choice for exactly those tokens and counts them; a choice that differs by more
// than the noise is kept, and the verdict fails it as routing.
#pragma once
#include <cstdint>
#include <vector>

namespace parity {

struct RouteOracle {
  const std::vector<std::vector<int64_t>>* chosen = nullptr;  // per MoE layer (n, K): the baseline's
  const std::vector<std::vector<double>>* scores = nullptr;   // per MoE layer (n, E): its s + bias
  double tie_rel = 0, tie_abs = 0;  // a near-tie: gap <= tie_rel * (|v_base| + |v_mine|) or <= tie_abs
  bool always = false;              // follow the baseline whatever the gap (the rounding twin)
};

// Where a run's routing asks the oracle: `first` is the global id of row 0 when the rows are
// consecutive tokens (the baseline and its twin); a layout passes each row's id instead.
struct RouteFollow {
  const RouteOracle* oracle = nullptr;
  int64_t layer = 0;  // MoE layer index (0 = the first MoE layer)
  int64_t first = 0;
};

// For n token rows with global ids ids[i] (or follow.first + i when ids is null): where a
// row's K choices differ from the baseline's and the difference is a near-tie (the first
// differing slot's two experts, valued by the baseline's scores), the row takes the
// baseline's K choices in the baseline's order. Returns how many rows it changed.
int64_t follow_baseline_routes(const RouteFollow& follow, const int64_t* ids, int64_t n, int64_t K, int64_t E,
                               int64_t* chosen);

}  // namespace parity
