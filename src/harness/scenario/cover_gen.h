// Proposes scenarios that cover the pairs a scenario set misses (harness/scenario/coverage.h): a
// greedy covering array. Each round tries every candidate layout (and, while a resume pair
// is missing, every pair of layouts as a resume check), sets each option to the value that
// covers the most missing pairs with that layout's modes (pairs are option x mode, so the
// options can be chosen one by one), and keeps the candidate that covers the most; ties go to
// the smaller world, then to the one covering more pairs in all (more modes exercised), then
// to the fewest changes from the template. No proposal holds a
// setting that cannot act (aux loss or bias update with top_k == experts; top_k 1 with
// route_norm and no aux loss, whose router gets no gradient). Every proposal is checked
// by validate_scenario and by the runner's batch rule, and what it covers is read back from
// the proposal itself by coverage::covered_pairs, the checker's own function.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "harness/scenario/coverage.h"
#include "mesh/run_config.h"

namespace parity::coverage {

// The model every proposal starts from: fsdp2_tp2_mb2_aux's sizes (vocab 64, dim 16,
// 2 layers of which 1 dense, 4 heads, seq 8, batch 8, 4 experts, top_k 2, one shared
// expert), one micro-batch, no aux loss, no bias update, adam lr 3e-3, fp64, 10 steps.
Scenario cover_template();

// The layouts proposals use: world 2..8, power-of-two degrees (batch 8 or 16 then splits
// over every data-parallel degree and micro-batch count), tp <= 4 and ep <= 4 (the
// template's heads and experts), cp 1 or 2, every etp that tiles the world and every sp the
// validator allows, under both rank orders (deepspeed only where its expert groups differ).
// A resume check resumes into a layout without cp (it covers cp through the one it saves under).
std::vector<LayoutConfig> candidate_layouts();

struct Proposal {
  Scenario scenario;
  std::vector<Pair> covers;  // the missing pairs it covers that no earlier proposal covered
  std::vector<OptionPair> option_covers;  // the same for option x option pairs
};

struct Proposals {
  std::vector<Proposal> scenarios;
  std::vector<Pair> left;    // missing pairs no candidate covers (empty unless a rule is wrong)
  std::vector<OptionPair> option_left;  // the same for option x option pairs
  size_t lower_bound = 0;    // no fewer scenarios can cover the missing pairs (see .cpp)
};

// Scenarios that, added to `shipped`, cover every possible pair; names are unique against
// `shipped` ("pw_<layout>_<what differs from the template>").
Proposals propose(const std::vector<Scenario>& shipped);

// A scenario file's text as the shipped files are written: every key in the schema's order
// (docs/scenario.md), two-space indent, a final newline.
std::string scenario_file_text(const Scenario& s);

}  // namespace parity::coverage
