// The trace's verdict (issue 45, docs/verdict.md "The trace"): every rank's sums of its traced
// shards (model/trace.h) against the baseline's full tensors, key by key in data-flow order, and
// the first key over its bound: the tensor where a failure enters, with the micro-batch, the rank
// and the element that differ most. Records and arithmetic only (the runner's side, which runs
// the two models traced and exchanges the sums: harness/runner/trace_run.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/verdict/verdict_root.h"
#include "model/config.h"
#include "model/trace.h"

namespace parity::trace_verdict {

// One rank's sums of one key: normwise, the scale ratio's terms, the elements compared, and the
// element with the largest |x - ref| (its flat index in the full tensor of the step).
struct Sums {
  double diff2 = 0, ref2 = 0, xr = 0, count = 0;
  double worst = -1, worst_index = -1, worst_got = 0, worst_ref = 0;
  static constexpr size_t kWidth = 8;
  void add(double x, double ref, int64_t index);
  void pack(std::vector<double>& out) const;
  static Sums unpack(const double* p);
};

// What names a key's elements: the step's shape.
struct StepShape {
  int64_t batch = 0, microbatches = 1, seq = 0, dim = 0, vocab = 0, layers = 0, moe_layers = 0;
  int64_t experts = 0, top_k = 0;
  int64_t kv_dim = 0;  // k's and v's columns (grouped-query attention: fewer than dim); 0: dim
  int64_t cols(trace::Site s) const {
    using trace::Site;
    if (s == Site::k || s == Site::v) return kv_dim > 0 ? kv_dim : dim;
    if (s == Site::logits) return vocab;
    if (s == Site::router || s == Site::scores) return experts;
    if (s == Site::route_w) return top_k;
    return s == Site::experts ? top_k * dim : dim;
  }
  double elements(trace::Site s) const { return static_cast<double>(batch * seq * cols(s)); }
};

struct Result {
  bool found = false;              // a key over its bound
  // Per parameter: where its gradient's partial sums come from and where they go (reduced_after), for
  // a root that enters after the backward (verdict_root.h root_line): {"layers.1.moe.router.gate", ...}.
  std::vector<std::pair<std::string, std::string>> reduced;
  std::string root;                // "layer 1 attn_out, forward, micro-batch 0, rank 3 (tp 1): x2.000 ..."
  std::vector<std::string> lines;  // the trace's table: the keys compared, the first over its bound, the unmapped
  std::vector<std::string> placements;  // what each rank records and where it lands (trace_run.h placement_lines)
};

// all: per rank, keys.size() Sums packed (kWidth each), in the keys' order; bounds: per key;
// coords: per rank, its coordinates in words ("dp_shard 1, tp 0"). A key that no rank traced,
// or whose ranks traced fewer elements than its full tensor, is named as not mapped, never passed.
Result first_diverging(const std::vector<trace::Key>& keys, const std::vector<double>& all, int world,
                       const std::vector<double>& bounds, const std::vector<std::string>& coords,
                       const StepShape& shape, const LayoutDegrees& degrees);

// The step's shape and the keys a model of config c records, in data-flow order.
StepShape step_shape(const ModelConfig& c);
std::vector<trace::Key> trace_keys(const ModelConfig& c);

// The traced keys whose backward (the gradient arriving at each) a parameter's gradient is computed
// from: a weight's gradient is its input times the gradient arriving at its output (wq: q's; wo:
// attn_out's, recorded as h_mid's; an MLP's or the shared expert's: ffn_out's, recorded as h_out's);
// a norm's weights', the gradient arriving at the norm's output; a tied embedding: the logits' and the
// embedding's. Empty: not a parameter of c.
std::vector<trace::Key> grad_sources(std::string_view param, const ModelConfig& c);
// Per parameter of c: "`layer 1 router, backward` (within its bound), in the partial sums of
// layers.1.moe.router.gate's gradient computed from it or in their reduction" and, where `plan` names
// the parameter's reductions (the runner's parameter plan, harness/runner/trace_run.h plan_reductions),
// " (the plan: summed over dense_dp (1 rank), then over tp (2 ranks))".
std::vector<std::pair<std::string, std::string>> reduced_after(
    const ModelConfig& c, const std::vector<std::pair<std::string, std::string>>& plan = {});

// A key's full tensor in a dump (dump --trace, parity_torch's trace.py): "trace.fwd.layers.1.q",
// "trace.bwd.embed", "trace.fwd.final_ln", stored (B, S, columns), sequence g of the step at row g.
std::string tensor_name(const trace::Key& k, int64_t layers);

}  // namespace parity::trace_verdict
