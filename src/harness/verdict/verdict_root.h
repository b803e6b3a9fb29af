// The root of a failing verdict: the earliest failing step and, at that step, the first
// failing quantity in the order data flows (loss, gradients in backward order, grad norm,
// clipping, routing / tokens / bias, parameters), with what its scale ratio suggests.
// Rows that fail only from a later step are its consequences: a bug at step 0 diverges the
// parameters, and from step 1 on everything differs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace parity {

struct VerdictReport;

// The degrees a clean wrong factor is compared with (a reduction over the wrong group
// scales by that group's size).
struct LayoutDegrees {
  int64_t tp = 1, ep = 1, etp = 1, dp = 1, world = 1;  // dp = dp_replicate * dp_shard
  int64_t microbatches = 1;                             // a loss scaled per micro-batch
  int64_t cp = 1;                                       // context parallel (a sum over cp dropped)
  int64_t pp = 1;                                       // pipeline stages (a sum over the stages repeated)
  // What a collected run records of its split (`parity compare`, harness/verdict/dump_split.h;
  // verdict_signature.h reads them): the batch and each dp rank's sequences at step 0 (empty:
  // not recorded), and per step the loss parts of every (rank, micro-batch) weighted by their
  // sequences, sum p * b / (B * reference loss) (NaN: not recorded): 1 / pieces when each
  // part is its rank's own mean.
  int64_t batch = 0;
  std::vector<int64_t> rank_sequences{};
  std::vector<double> own_mean_ratio{};
};

struct RootCause {
  bool found = false;
  size_t row = 0;        // index into VerdictReport::rows
  int64_t step = -1;
  std::string factor;    // "2 (= tp): summed where it should be averaged, or counted twice"
  std::vector<size_t> same_step;     // other rows failing first at the root's step
  std::vector<size_t> consequences;  // rows failing only from a later step
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
