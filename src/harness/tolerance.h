// The one tolerance table of the project, keyed by dtype (ARCHITECTURE.md 4). A correct
// layout differs from the baseline only by the order of floating-point sums; every bound
// below is derived from that and carries its derivation.
#pragma once
#include "core/tensor.h"

namespace parity {

// What is compared. Later quantities have been through more steps, so rounding has had
// more chances to grow; each row says how much.
enum class Quantity { loss, gradient, grad_norm, parameter, routing_score, op_result, golden_curve };

struct Tolerance {
  double norm_rel;  // bound on ||x - ref|| / ||ref|| for a whole tensor or family
  double elem_rel;  // an element is "bad" when |x - ref| > elem_rel * (|ref| + ||ref||_rms)
};

Tolerance tolerance_for(DType dtype, Quantity q);

}  // namespace parity
