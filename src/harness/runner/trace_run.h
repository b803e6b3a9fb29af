// The traced step of a verdict (issue 45, docs/verdict.md "The trace"): when a verdict fails (or
// with --trace), its first failing step is run again with tracing on, on the baseline and on the
// layout, and the first traced tensor (model/trace.h) over its bound names where the failure
// enters. The layout's step records its shards while it runs (a trace::Scope around
// ParallelRun::step); the baseline's records come from a one-device model given the baseline's
// parameters and expert biases before the step; each rank sums its shards against the baseline's
// full tensors through the canonical mapping (trace::for_each_global_index), one allgather carries the
// sums, and harness/verdict/trace_verdict.h names the first over its bound.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "harness/runner/baseline.h"
#include "harness/verdict/trace_verdict.h"
#include "harness/verdict/verdict.h"
#include "mesh/mesh.h"
#include "mesh/run_config.h"
#include "model/route_oracle.h"
#include "model/trace.h"

namespace parity {

// The baseline's records of step t: the one-device model from `params` (registry order) and
// `bias` (per MoE layer), every micro-batch of the step, routed as `routes` says (the baseline's
// record of the step: the routing the layout follows, model/route_oracle.h). With `twin`: the
// rounding twin's (twin.h): every parameter one ulp off, the storage points jittered. `fp8_scales`:
// fp8-delayed's scales of the step (the baseline's record; empty under any other policy).
template <class T>
trace::Recorder baseline_trace(const Scenario& s, int64_t t, std::vector<Tensor<T>> params,
                               const std::vector<Buffer<T>>& bias, const RouteOracle& routes,
                               const std::vector<double>& fp8_scales, bool twin);

// The traced step on one rank: the baseline's expert biases before it, the layout's records.
template <class T> struct TracedStep {
  std::vector<Buffer<T>> bias;
  trace::Recorder layout;  // under a trace::Scope around the layout's step
  // Collective over `world`: the baseline and its twin traced from `params` (before step b.step), each
  // key's bound from the twin's noise (tolerance.h trace_bound), every rank's sums folded.
  // param_bound: the step's largest param row bound under the trajectory verdict, else 0.
  trace_verdict::Result fold(const Scenario& s, comm::Communicator& world, const mesh::Mesh& m,
                             const StepRecord<T>& b, const std::vector<Tensor<T>>& params, double param_bound) const;
};

using trace_verdict::step_shape, trace_verdict::trace_keys;

// The full tensors (B·S, columns, flat) of a one-device record, per key of `keys` (empty: not recorded).
std::vector<std::vector<double>> trace_full(const std::vector<trace::Key>& keys, const trace::Recorder& base,
                                            const ModelConfig& c);

// This rank's sums (trace_verdict::Sums, packed) of `mine` against the one-device record's full tensors (trace_full,
// formed once for every record held to them), per key of `keys`.
std::vector<double> trace_sums(const std::vector<trace::Key>& keys, const std::vector<std::vector<double>>& full,
                               const trace::Recorder& mine, const ModelConfig& c);

// Collective over `world`: every rank's sums, folded, the bounds from the twin's noise per key.
trace_verdict::Result trace_fold(const Scenario& s, comm::Communicator& world, const mesh::Mesh& m,
                                 const trace::Recorder& base, const trace::Recorder& twin,
                                 const trace::Recorder& mine, double param_bound);

// What the correct parameter plan (parallel/param_plan.h) does with each parameter's gradient after
// the backward, with its groups' sizes: {"layers.1.moe.router.gate", "summed over dense_dp (1 rank),
// then over tp (2 ranks)"} (trace_verdict.h reduced_after joins it with the op that produced the sums).
std::vector<std::pair<std::string, std::string>> plan_reductions(const Scenario& s, const mesh::Mesh& m);

// Collective over `world`: the step to trace, the same on every rank (a simulated world folds its
// rows on rank 0 alone): the earliest failing row's step, or with `always` (--trace) step 0 of a
// passing verdict; -1: none. Without a failure and --trace, tracing costs this one allreduce.
int64_t step_to_trace(comm::Communicator& world, const std::vector<Row>& rows, bool always);

// Collective over `world`: what each rank records and where it lands in the full tensor (the
// canonical mapping, trace::global_token), a markdown table, one row per rank and landing
// (`parity explain --trace`).
std::vector<std::string> placement_lines(comm::Communicator& world, const mesh::Mesh& m, const trace::Recorder& mine,
                                         const ModelConfig& c);

// A rank's coordinates in words, the degrees above 1: "dp_shard 1, tp 0".
std::string rank_coords(const mesh::Mesh& m, int rank);

}  // namespace parity
