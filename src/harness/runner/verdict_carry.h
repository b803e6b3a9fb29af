// A resume check's carry (docs/verdict.md "A resumed run"): what the verdict knows of the
// layout's optimizer moments after phase 1's last step, per global element, handed to phase 2's
// first step, so that step is judged as the step after phase 1's last would be in one
// uninterrupted run. Without it phase 2 started the baseline's moment replay from the layout's
// own moments, so what phase 1's steps had legitimately moved them (a 16-bit reduction's
// roundings, each judged at its step) stood unexplained at the resumed step: every resume
// scenario with a TP or DP reduction failed under bf16-reduce-bf16 (issue 41).
//
// Phase 1 (save): each rank writes the elements it counts (verdict_taken::Moments: the moments
// its optimizer should have left, their tolerances, the replay of the baseline's) to
// DIR/rank<R>.carry. Phase 2 (load, on its first step, after before_step): each rank reads every
// file and takes, for each of its counted elements, phase 1's values. Then append_sums' own test
// decides, element by element: the moments loaded are phase 1's (within what reading them
// rounds) and the replay goes on, or they are not (a checkpoint that lost or swapped a moment,
// the zoo's ckpt_v_from_m_buffer) and the replay starts from the layout's own, as before, so
// nothing carried wrong is explained. A parameter with an element missing from the files (a
// rank on another host, a phase 1 on one device) is not carried. Internal files of the resume
// check (its own temporary directory), never a user's checkpoint directory.
#pragma once
#include <string>
#include <vector>

#include "harness/runner/verdict_taken.h"
#include "model/params.h"

namespace parity::verdict_carry {

// Writes this rank's counted elements of `mo` to dir/rank<rank>.carry (dir created if missing;
// the file written whole, then renamed). Throws IoError on a write that fails.
void save(const verdict_taken::Moments& mo, const std::vector<ParamSpec>& specs, const std::string& dir, int rank);

// Fills mo's m_after, v_after, m_tol, v_tol, shadow_m and shadow_v for every counted parameter
// whose elements (mo.idx, set by before_step) are all in dir's files; the others stay empty (not
// carried). Returns how many parameters were carried. A missing directory carries nothing;
// a damaged file throws IoError.
size_t load(verdict_taken::Moments& mo, const std::vector<ParamSpec>& specs, const std::string& dir);

}  // namespace parity::verdict_carry
