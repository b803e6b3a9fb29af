// The verdict's runner (verdict_run.cpp, verdict_part.cpp): baseline and layout side by side
// in every rank, one allgather of every group's sums per step, rows folded over the steps.
// Internal to harness/runner: run_verdict (verdict_run.h) is the entrance.
#pragma once
#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/rank_env.h"
#include "core/error.h"
#include "harness/runner/baseline.h"
#include "harness/runner/comm_clock.h"
#include "harness/runner/shared_baseline.h"
#include "harness/runner/trace_run.h"
#include "harness/runner/verdict_copies.h"
#include "harness/runner/verdict_run.h"
#include "harness/runner/verdict_taken.h"
#include "harness/verdict/bounds.h"
#include "harness/verdict/verdict_detail.h"
#include "harness/verdict/verdict_state.h"
#include "harness/verdict/verdict_wire.h"
#include "parallel/parallel_run.h"

namespace parity::verdict_runner {

namespace vd = verdict_detail;
using verdict_wire::Section;
using Clock = std::chrono::steady_clock;

// This rank's place among the readers of its host's shared baseline: its local rank.
inline int local_slot(int world_rank) { return comm::local_rank_or(world_rank); }

template <class T> class Runner {
 public:
  Runner(const Scenario& s, comm::Communicator& world, const VerdictOptions& o)
      : sc_(s),
        world_(world),
        opt_(o),
        clock_(std::make_shared<CommClock>()),
        timed_(timed_communicator(world, clock_)),
        base_(make_baseline_source<T>(s, local_slot(world.rank()), o.baseline_file)),
        par_(s, *timed_, o.valid),
        rank_(world.rank()) {
    build_groups();
    *clock_ = CommClock{};  // from here on: the steps' communication only
  }

  void step(int64_t t, VerdictReport& rep);
  // The layout loads `dir`; the baseline replays the steps before the saved one. Returns it.
  int64_t resume(const std::string& dir);
  void save(const std::string& dir, int64_t done);
  Timings& time() {
    time_.layout_comm = clock_->seconds, time_.layout_comm_calls = static_cast<double>(clock_->calls);
    return time_;
  }
  std::vector<Row>& rows() { return rows_; }
  // Noise every step's bound takes at least (verdict_run.cpp measure_again: the twins' whole run).
  void seed_noise(std::vector<double> noise) { seed_ = std::move(noise); }
  // issue 45: step t runs traced, on the baseline and the layout (trace_run.h); its result
  void trace_at(int64_t t) { trace_at_ = t; }
  const trace_verdict::Result& traced() const { return traced_; }

 private:
  void build_groups();
  // ref_sq: per ref tensor, its sum of squares (StepSums); mag: per tensor, what bounds a 16-bit
  // reduction's roundings (RankStepRecord::grad_magnitude), or empty
  void add_tensors(std::vector<vd::LocalSums>& acc, size_t offset, const std::vector<Tensor<T>>& got,
                   const std::vector<Tensor<T>>& ref, const std::vector<double>& ref_sq,
                   const std::vector<Tensor<T>>& mag = {}, const std::vector<Tensor<T>>* exact = nullptr);
  // A policy that reduces gradients in 16 bits (bf16-reduce-bf16): the grad rows compare the reductions'
  // exact results, and the taken gradient is held to the one the rank holds (verdict_taken.h Held).
  bool reduces_in_16_bits() const { return sc_.model.reduce != Low::none; }
  // Whether the grad rows compare the reductions' exact results (RankStepRecord::grads_exact); throws when
  // the policy asks for them and a record lacks them.
  bool exact_grads(const StepRecord<T>& b, const RankStepRecord<T>& p) const {
    if (!reduces_in_16_bits()) return false;
    if (!b.grads_exact || p.grads_exact.size() != p.grads.size())
      throw Error("verdict: step " + std::to_string(b.step) + " lacks the reductions' exact gradients");
    return true;
  }
  // Each grad row's bound and the grad norm's, with what the policy's 16-bit reductions may move
  // (tolerance.h with_reduction), from every rank's allowances in `all`.
  void add_reduction_allowance(const std::vector<double>& all, const std::vector<double>& fam_sq);
  // This rank's part of the step (verdict_wire.h): every section, in order.
  std::vector<double> part(const StepRecord<T>& b, const RankStepRecord<T>& p);
  // Its sections from scalars to routes.
  void local_part(const StepRecord<T>& b, const RankStepRecord<T>& p, std::vector<double>& out);
  // Every rank's part on every rank (on rank 0 alone in a simulated world).
  std::vector<double> exchange(const std::vector<double>& mine);
  // Step t's rows from every rank's part (`all`): the grad rows' floors, the scalars, every
  // family group's row and the replicas', each MoE layer's routing.
  void fold(int64_t t, const StepRecord<T>& b, const std::vector<double>& all, VerdictReport& rep);
  // A grad row's floor for its model: few tokens, a family far below the model's largest gradient
  // so far, a saturated softmax (tolerance.h gradient_row_bound); fam_sq: the baseline's per family.
  void grad_floors(const StepRecord<T>& b, const std::vector<double>& fam_sq);
  void fold_groups(int64_t t, const std::vector<double>& all);  // and the replicas row
  void fold_routes(int64_t t, const std::vector<double>& all, StepLine& line);
  StepLine scalars(int64_t t, const StepRecord<T>& b, const std::vector<double>& all,
                   const std::vector<double>& fam_sq);
  vd::Outcome scale_outcome(const StepRecord<T>& b, const std::vector<double>& all) const;
  std::vector<double> family_norm_sq(const StepRecord<T>& b);
  std::vector<double> family_norm_sq_exact(const StepRecord<T>& b);  // b.grads_exact's
  void apply_fault(RankStepRecord<T>& p) const;
  void set_bounds(const std::vector<double>& noise);
  // the trajectory's drift of the parameters before the step (tolerance.h trace_bound)
  double trace_param_bound() const {
    double b = 0;
    for (size_t g = 0; sc_.trajectory && g < n_fam_; ++g) b = std::max(b, bounds_[3 + n_fam_ + g].value);
    return b;
  }
  void continue_from_baseline();

  const Scenario& sc_;
  comm::Communicator& world_;
  VerdictOptions opt_;
  std::shared_ptr<CommClock> clock_;
  std::unique_ptr<comm::Communicator> timed_;  // the world the layout runs on, timed
  std::unique_ptr<BaselineSource<T>> base_;  // trained here, or the host's shared one
  ParallelRun<T> par_;
  int rank_;
  std::vector<vd::GroupSpec> groups_;
  std::vector<size_t> group_of_param_;      // per parameter: its family's index among the grad groups
  size_t n_fam_ = 0;                        // grad groups [0, n_fam), param groups [n_fam, 2 n_fam)
  std::vector<std::vector<int64_t>> idx_;   // per parameter: global_indices on this rank
  std::vector<char> counted_;               // per parameter: counted_copy on this rank
  std::vector<std::vector<int64_t>> gidx_;  // the same for the reduced gradients (grad_layouts: zero2 shards them)
  std::vector<char> gcounted_;
  std::vector<uint64_t> ikey_, gikey_;      // per parameter: the index_key of idx_ and gidx_ (verdict_detail.h)
  std::vector<Row> rows_;                   // loss, grad_norm, clip_coef, groups..., routing per layer
  size_t scale_row_ = SIZE_MAX;             // fp16: the loss scale and skipped steps' row (exact)
  std::vector<Family> group_family_;        // per grad group (and its param group): the family
  std::vector<double> group_elements_;      // per grad group: the family's global element count
  std::optional<BoundEnvelope> envelope_;   // the twin's largest noise so far, per row (harness/verdict/bounds.h)
  std::vector<double> seed_;                // folded into envelope_ before the first step (seed_noise)
  std::vector<Bound> bounds_;               // per row: this step's bound (routing rows: unused)
  // per grad group: its bound with what the policy's 16-bit reductions may move (tolerance.h with_reduction),
  // which the grad norm and the gradient the optimizer took are held to (the grad rows compare the
  // reductions' exact results: add_tensors)
  std::vector<Bound> reduced_bounds_;
  double route_tie_ = 0;                    // this step's absolute near-tie gap
  double model_sq_peak_ = 0;  // the baseline's largest squared gradient norm so far (tolerance.h kDeadGradient)
  double far_model_sq_peak_ = 0;  // the same for is_far's magnitude of this rank's gradients (verdict_part.cpp)
  std::vector<double> far_bounds_;          // per param group: this step's bound on the update's far elements
  Timings time_;
  // Parameters before the step (this rank's shards, the baseline's full tensors): the scale
  // ratio of a param row is taken on the update, after - before, where a 2x gradient under
  // SGD shows as 2 (on the parameters themselves it is 1.000...).
  std::vector<Tensor<T>> before_local_;
  std::vector<Tensor<T>> held_grads_;  // under a harness grad fault: the rank's gradients before it (else empty)
  std::shared_ptr<const std::vector<Tensor<T>>> before_base_;  // shared with the baseline where it can be
  // this step's baseline sums over the whole model (family_sums.h): the shared baseline's, or formed here
  std::shared_ptr<const family_sums::StepSums> sums_;
  int64_t sums_step_ = -1;
  const family_sums::StepSums& sums_of(const StepRecord<T>& b);
  verdict_state::Keys state_keys_;  // the optimizer state's entries on this rank (the replicas row)
  bool keyed_ = false;
  verdict_wire::Layout wire_;  // a rank's part of a step (made at the first step, with the state's entries)
  verdict_taken::Moments moments_;  // this rank's first moments before the step (verdict_taken.h)
  bool carry_pending_ = false;      // phase 2 of a resume check: load phase 1's carry at the first step
  // taken: per param group, the sums of the gradient the optimizer took (verdict_taken::append_sums)
  void add_update_sums(const RankStepRecord<T>& p, const family_sums::StepSums& sums, const std::vector<double>& taken,
                       std::vector<double>& out);
  // per param group: the update's scale ratio, its far elements, its counted elements, and the
  // taken gradient's normwise error (less what reading it back rounds, except against the gradient held), scale
  // ratio (NaN: nothing taken to compare), far and counted elements, the update its difference explains
  // (verdict_taken.h), absolute, the elements that update makes far, and the held measure's bound (NaN: not held)
  std::vector<std::array<double, 10>> update_ratios(const std::vector<double>& all) const;
  // per param group in Section::updates: UpdateSums, then the taken gradient's sums
  static constexpr size_t kUpdateWidth = verdict_wire::UpdateSums::kWidth + verdict_taken::kWidth;
  int64_t trace_at_ = -1;
  trace_verdict::Result traced_;
  // the compute copies against the one-device copy, bit for bit (harness/verdict/compute_copy.h): under a
  // policy with a compute copy only; its row
  std::optional<verdict_copies::CopyCheck<T>> copies_;
  size_t copy_row_ = SIZE_MAX;
};

}  // namespace parity::verdict_runner
