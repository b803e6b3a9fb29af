#include "harness/tolerance.h"

namespace parity {

// Derivation. A sum of n terms in another order differs by at most about
// log2(n) * u * sum|terms| with pairwise-like reductions and n * u in the worst case
// (u = 2^-53 = 1.1e-16 in fp64, 2^-24 = 6.0e-8 in fp32). The reductions parity reorders
// are over ranks and micro-batches (n <= 64 terms per element, a few levels deep through
// the backward), and cancellation in a gradient can magnify the relative error of an
// element by |sum terms| / |sum|; normwise, over a whole tensor, that magnification
// averages out. So:
//  - loss, grad norm: scalars from long positive sums: 1e-13 (fp64) = ~1000 u; fp32 1e-5
//    = ~170 u.
//  - gradients: normwise 1e-11 (fp64, ~1e5 u: depth ~10 ops x 64 terms x cancellation
//    headroom 100) and 1e-4 in fp32 (~1700 u; fp32 rounding of activations dominates).
//  - parameters after steps: adam divides by sqrt(v), which turns a relative gradient
//    error e into a relative update error ~e, accumulated over steps: 1e-10 / 1e-3.
//  - routing scores: softmax of logits with the gradient's error: 1e-11 / 1e-4.
// Element bounds are 1000x looser than normwise (single elements can sit on cancellation)
// and only count elements for the report; the verdict is the normwise bound.
Tolerance tolerance_for(DType dtype, Quantity q) {
  const bool f64 = dtype == DType::f64;
  switch (q) {
    case Quantity::loss:
    case Quantity::grad_norm: return f64 ? Tolerance{1e-13, 1e-10} : Tolerance{1e-5, 1e-3};
    case Quantity::gradient:
    case Quantity::routing_score: return f64 ? Tolerance{1e-11, 1e-8} : Tolerance{1e-4, 1e-2};
    case Quantity::parameter: return f64 ? Tolerance{1e-10, 1e-7} : Tolerance{1e-3, 1e-1};
  }
  return {0, 0};
}

}  // namespace parity
