// The classic signatures of a framework's data-parallel bugs (issue 46 item 3), read on the
// root of a failing verdict where a scale alone says "not a clean factor" or "1: not a
// scaling". The uneven case is where these bugs live, and a collected run records its split
// (LayoutDegrees::rank_sequences, own_mean_ratio: `parity compare` of a parity_torch dump):
//   - a rank's own share: a root scaled by n_r / B, the share of the batch dp rank r holds
//     (0.6 = rank 0's 3 of 5 sequences): its own counts or gradients, not summed over ranks;
//   - a per-rank mean loss: the root is the loss, and the loss parts weighted by each rank's
//     sequences give the reference's loss over the number of pieces (dp x micro-batches):
//     each part was its rank's own mean, right only when every rank holds as many sequences;
//   - clipping before the sync: every gradient family shrunk by about one factor (within 25%)
//     at the root's step while the candidate's clip_coef is 1 and the reference clips;
//   - gradients averaged twice: every gradient family x 1/dp at the root's step.
// Read on `parity compare`'s reports only (a framework's run; parity's own layouts and zoo keep
// their factor words). No process, file or environment: the report's records only (tested on
// hand-made ones).
#pragma once
#include <string>

#include "harness/verdict/verdict_root.h"

namespace parity {

struct VerdictReport;

// The signature the root's rows match, as the root line's meaning, or "" for none.
std::string signature_meaning(const VerdictReport& r, const RootCause& root);

}  // namespace parity
