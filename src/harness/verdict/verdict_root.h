// The root of a failing verdict: the earliest failing step and, at that step, the first
// failing quantity in the order data flows (loss, gradients in backward order, grad norm,
// clipping, routing / tokens / bias, parameters), with what its scale ratio suggests.
// Rows that fail only from a later step are its consequences: a bug at step 0 diverges the
// parameters, and from step 1 on everything differs.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace parity {

struct VerdictReport;

struct LayoutConfig;

// The degrees a clean wrong factor is compared with (a reduction over the wrong group
// scales by that group's size).
struct LayoutDegrees {
  // Each factor word of the layout's degree table (mesh/layout_config.h factor_words: tp, ep,
  // etp, dp = dp_replicate x dp_shard, cp, world, pp) and the micro-batches (a loss scaled per
  // micro-batch), in the order a tie is worded ("2 (= ep) or 2 (= dp)"), with its value.
  std::vector<std::pair<std::string, int64_t>> factors;
  int64_t of(std::string_view word) const;  // 1 where not named
  static constexpr std::string_view kMicrobatches = "microbatches";
  // What a collected run records of its split (`parity compare`, harness/verdict/dump_split.h;
  // verdict_signature.h reads them): the batch and each dp rank's sequences at step 0 (empty:
  // not recorded), and per step the loss parts of every (rank, micro-batch) weighted by their
  // sequences, sum p * b / (B * reference loss) (NaN: not recorded): 1 / pieces when each
  // part is its rank's own mean.
  int64_t batch = 0;
  std::vector<int64_t> rank_sequences{};
  std::vector<double> own_mean_ratio{};
};

// A layout's factors (each word's value: mesh/layout_config.h factor_value).
LayoutDegrees layout_factors(const LayoutConfig& l, int64_t microbatches);
// Factors from each word's value (a producer's record; a word absent is 1), in the table's order.
LayoutDegrees named_factors(const std::map<std::string, int64_t, std::less<>>& values, int64_t microbatches);

struct RootCause {
  bool found = false;
  size_t row = 0;        // index into VerdictReport::rows
  int64_t step = -1;
  std::string factor;    // "2 (= tp): summed where it should be averaged, or counted twice"
  std::vector<size_t> same_step;     // other rows failing first at the root's step
  std::vector<size_t> consequences;  // rows failing only from a later step
  // The factor reads "at rounding level": every row failing at the root's step within kRoundingLevel
  // of its bound, no clean factor (the verdict then measures the rounding again, docs/verdict.md)
  bool rounding = false;
};

// Position of a row's quantity in the data flow (lower: earlier).
int data_flow_rank(const std::string& quantity, const std::string& subject);
// What a scale ratio suggests, given the layout's degrees: a named clean factor or
// "not a clean factor".
std::string factor_meaning(double scale_ratio, const LayoutDegrees& d);
RootCause find_root(const VerdictReport& r);
// "root: grad router at step 0, scale 0.686 (not a clean factor); 20 rows fail only from
// later steps (consequences)"; "" when nothing failed.
std::string root_line(const VerdictReport& r, const RootCause& root);
nlohmann::json root_json(const VerdictReport& r, const RootCause& root);

}  // namespace parity
