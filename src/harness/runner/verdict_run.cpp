// The verdict's step loop (verdict.h): baseline and layout side by side in every rank, one
// allgather of every group's sums per step, rows folded over the steps. The runner is declared in
// verdict_runner.h; this rank's part of a step (the sums it contributes) is verdict_part.cpp.
#include "harness/runner/verdict_run.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <span>

#include "ckpt/training_state.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/inject.h"
#include "core/knobs.h"
#include "core/text.h"
#include "harness/runner/floors_first.h"
#include "harness/runner/twin.h"
#include "harness/runner/verdict_carry.h"
#include "harness/runner/verdict_runner.h"
#include "harness/scenario/memory.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/tolerance.h"
#include "harness/verdict/verdict_root.h"
#include "harness/verdict/verdict_flow.h"
#include "optim/optimizer.h"

namespace parity {
namespace verdict_runner {

template <class T> void Runner<T>::build_groups() {
  const auto& specs = par_.specs();
  const auto& mesh = par_.mesh();
  vd::VerdictLayout v = vd::verdict_layout(specs, sc_.model);
  group_family_ = std::move(v.families), group_elements_ = std::move(v.elements);
  group_of_param_ = std::move(v.group_of), groups_ = std::move(v.groups), rows_ = std::move(v.rows);
  n_fam_ = group_family_.size();
  if (scales_loss(sc_.model.precision()))  // fp16: the scale of every step and its skip, exactly
    scale_row_ = rows_.size(), rows_.push_back(vd::make_row("loss_scale", "and skipped steps", 0));
  if (sc_.model.precision().store != Low::none)  // the compute copies, bit for bit (harness/verdict/compute_copy.h)
    copy_row_ = rows_.size(), rows_.push_back(vd::make_row("compute_copy", "every gathered copy", 0)),
    copies_.emplace(par_, sc_);
  rows_.push_back(vd::make_row("replicas", "every tensor", 0));  // bit for bit (verdict_detail.h)
  for (size_t p = 0; p < specs.size(); ++p) {
    idx_.push_back(mesh::global_indices(mesh, par_.layouts()[p], specs[p].shape, world_.world_rank()));
    counted_.push_back(parity::counted_copy(mesh, par_.layouts()[p], world_.world_rank()) ? 1 : 0);
    gidx_.push_back(mesh::global_indices(mesh, par_.grad_layouts()[p], specs[p].shape, world_.world_rank()));
    gcounted_.push_back(parity::counted_copy(mesh, par_.grad_layouts()[p], world_.world_rank()) ? 1 : 0);
    const size_t g = group_of_param_[p];
    groups_[g].copies = std::max(groups_[g].copies, parity::copies_of(mesh, par_.grad_layouts()[p]));
    groups_[n_fam_ + g].copies = std::max(groups_[n_fam_ + g].copies, parity::copies_of(mesh, par_.layouts()[p]));
  }
  std::vector<int64_t> pos(n_fam_, 0);  // a tensor's place in its group (add_tensors' tensor_id)
  for (size_t p = 0; p < specs.size(); ++p) {
    const int64_t id = pos[group_of_param_[p]]++;
    ikey_.push_back(vd::index_key(id, idx_[p].data(), idx_[p].size()));
    gikey_.push_back(vd::index_key(id, gidx_[p].data(), gidx_[p].size()));
  }
}

// This step's bound of every row (harness/verdict/bounds.h): kTwinFactor x the twin's largest
// noise up to this step, never below the floor.
template <class T> void Runner<T>::set_bounds(const std::vector<double>& noise) {
  if (!envelope_) {
    envelope_.emplace(sc_.model.precision(), group_family_, group_elements_, !sc_.trajectory);
    envelope_->seed(seed_);
  }
  const StepBounds& sb = envelope_->step(noise);
  bounds_.assign(rows_.size(), Bound{});
  bounds_[0] = sb.loss;
  bounds_[1] = bounds_[2] = sb.grad_norm;
  for (size_t g = 0; g < n_fam_; ++g) bounds_[3 + g] = sb.grad[g], bounds_[3 + n_fam_ + g] = sb.param[g];
  if (groups_.size() > 2 * n_fam_) bounds_[3 + 2 * n_fam_ + 1] = sb.expert_bias;  // tokens_per_expert: exact
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].tol.norm_rel = bounds_[3 + g].value;
  for (size_t g = 0; g < n_fam_; ++g) groups_[g].far_bound = sb.grad_far[g];
  far_bounds_ = sb.update_far;  // on the update (fold)
  route_tie_ = sb.route_tie;
}

template <class T> void Runner<T>::apply_fault(RankStepRecord<T>& p) const {
  if (!opt_.fault || (opt_.fault->rank >= 0 && opt_.fault->rank != world_.rank())) return;
  if (opt_.fault->target == Fault::Target::loss) {
    p.loss *= opt_.fault->factor;
    for (double& m : p.micro_losses) m *= opt_.fault->factor;
    return;
  }
  if (opt_.fault->target == Fault::Target::grad_norm) {
    p.grad_norm *= opt_.fault->factor;
    return;
  }
  const auto& specs = par_.specs();
  const bool grad = opt_.fault->target == Fault::Target::grad || opt_.fault->target == Fault::Target::rounded_grad;
  auto& ts = grad ? p.grads : p.params;
  const auto scale = [&](std::vector<Tensor<T>>& xs) {
    for (size_t i = 0; i < specs.size() && i < xs.size(); ++i)
      if (specs[i].family == opt_.fault->family)
        for (T& x : xs[i].data) x = static_cast<T>(static_cast<double>(x) * opt_.fault->factor);
  };
  scale(ts);
  if (opt_.fault->target == Fault::Target::grad) scale(p.grads_exact);  // a fault before the reductions
}


template <class T>
StepLine Runner<T>::scalars(int64_t t, const StepRecord<T>& b, const std::vector<double>& all,
                            const std::vector<double>& fam_sq) {
  StepLine line{t, b.loss, b.loss, 0, 0, 0, b.clip_coef, b.clip_coef, 0};
  vd::Outcome loss, norm, clip;
  loss.norm_rel = norm.norm_rel = clip.norm_rel = -1;
  const auto consider = [](vd::Outcome& o, double got, double ref, int r, const std::string& name, double tol,
                           double whole = std::numeric_limits<double>::quiet_NaN()) {
    vd::consider_scalar(o, got, ref, r, name, tol, whole);
  };
  // which family moves the norm: by the exact reductions' parts where the grad rows compare those (the
  // rounded gradients' parts, within their rows' bounds with the reductions' allowance, elsewhere)
  const bool exact = b.grads_exact && !std::isnan(wire_.of(all, 0, Section::family_norm_sq)[kFamilyCount]);
  const std::vector<double> base_sq = exact ? family_norm_sq_exact(b) : fam_sq;
  const std::vector<Bound> grad_bounds =
      exact ? std::vector<Bound>(bounds_.begin() + 3, bounds_.begin() + 3 + static_cast<std::ptrdiff_t>(n_fam_))
            : reduced_bounds_;
  const double* got_sq = wire_.of(all, 0, Section::family_norm_sq) + (exact ? kFamilyCount : 0);  // every rank's
  // the grad norm's and the clip coefficient's bounds beside what the families' own gradients move them by
  const double explained = vd::norm_explained_by_families(base_sq, got_sq, group_family_, grad_bounds);
  const Bound nb = with_explained(bounds_[1], explained), cb = with_explained(bounds_[2], explained);
  const double lt = bounds_[0].value, nt = nb.value;
  for (int r = 0; r < world_.size(); ++r) {
    const double* x = wire_.of(all, r, Section::scalars);
    const double* micro = wire_.of(all, r, Section::micro_losses);
    const double got = x[verdict_wire::kLoss];
    consider(loss, got, b.loss, r, "loss", lt);
    if (r == 0 || std::abs(got - b.loss) > std::abs(line.loss_diff)) line.loss = got, line.loss_diff = got - b.loss;
    for (size_t m = 0; m < b.micro_losses.size(); ++m) {
      const double ref = b.micro_losses[m], err = std::abs(micro[m] - ref) / (ref != 0 ? std::abs(ref) : 1.0);
      line.micro_rel = std::max(line.micro_rel, std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
      // relative to the step's loss: the micro-batches' losses are its parts, and one bf16
      // flip that moves the step's loss by its whole bound moves one part M times as much
      consider(loss, micro[m], ref, r, "micro-batch " + std::to_string(m), lt, b.loss);
    }
    consider(norm, x[verdict_wire::kGradNorm], b.grad_norm, r, "grad_norm", nt);
    consider(clip, x[verdict_wire::kClipCoef], b.clip_coef, r, "clip_coef", cb.value);
    if (r == 0) line.clip_coef = x[verdict_wire::kClipCoef];
  }
  line.grad_norm_rel = norm.norm_rel;
  if (norm.verdict == RowVerdict::ok && vd::family_norm_off(base_sq, got_sq, group_family_, grad_bounds))
    norm.verdict = RowVerdict::fail;
  loss.bound = bounds_[0], norm.bound = nb, clip.bound = cb;
  vd::update_row(rows_[0], t, loss);
  vd::update_row(rows_[1], t, norm);
  if (rows_[1].verdict == RowVerdict::fail && rows_[1].step == t && rows_[1].detail.empty())
    rows_[1].detail = vd::norm_by_family(base_sq, got_sq, group_family_, grad_bounds, bounds_[1].value);
  vd::update_row(rows_[2], t, clip);
  if (scale_row_ < rows_.size()) vd::update_row(rows_[scale_row_], t, scale_outcome(b, all));
  return line;
}

// fp16: every rank's loss scale and skip of this step against the baseline's, exactly (the one
// device is the definition: a rank that skips apart, or runs another scale, is a bug).
template <class T> vd::Outcome Runner<T>::scale_outcome(const StepRecord<T>& b, const std::vector<double>& all) const {
  vd::Outcome o;
  o.scale_ratio = std::numeric_limits<double>::quiet_NaN();
  o.compared = world_.size();
  const auto said = [](double scale, bool skipped) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "scale %.9g, %s", scale, skipped ? "skipped" : "not skipped");
    return std::string(buf);
  };
  int named = -1;  // the rank the detail names: the first with another scale, else the first that skipped apart
  for (int r = 0; r < world_.size(); ++r) {
    const double* x = wire_.of(all, r, Section::scalars);
    const bool scale_off = x[verdict_wire::kLossScale] != b.loss_scale;
    if (!scale_off && (x[verdict_wire::kSkipped] != 0) == b.skipped) continue;
    if (named < 0 || (scale_off && wire_.of(all, named, Section::scalars)[verdict_wire::kLossScale] == b.loss_scale))
      named = r;
    o.verdict = RowVerdict::fail, o.norm_rel += 1;
  }
  if (named < 0) return o;
  const double* x = wire_.of(all, named, Section::scalars);
  const bool skipped = x[verdict_wire::kSkipped] != 0;
  o.detail = "rank " + std::to_string(named) + ": " + said(x[verdict_wire::kLossScale], skipped) +
             "; the baseline: " + said(b.loss_scale, b.skipped) +
             (x[verdict_wire::kLossScale] == b.loss_scale
                  ? " (the found-inf flag not taken over the whole world: ranks skip different steps)"
                  : " (the loss scale not the world's: a rank backed off, grew or resumed apart)");
  return o;
}

template <class T>
void Runner<T>::fold(int64_t t, const StepRecord<T>& b, const std::vector<double>& all, VerdictReport& rep) {
  wire_.expect_whole(all, world_.size());
  const std::vector<double> fam_sq = family_norm_sq(b);
  grad_floors(b, fam_sq);
  add_reduction_allowance(all, fam_sq);
  StepLine line = scalars(t, b, all, fam_sq);
  fold_groups(t, all);
  if (copies_) {
    std::vector<const double*> parts;
    for (int r = 0; r < world_.size(); ++r) parts.push_back(wire_.of(all, r, Section::copies));
    const Precision policy = sc_.model.precision();
    vd::update_row(rows_[copy_row_], t, compute_copy::outcome(parts, copies_->params(), policy, sc_.model.dtype));
  }
  fold_routes(t, all, line);
  rep.step_lines.push_back(line);
}

template <class T> void Runner<T>::grad_floors(const StepRecord<T>& b, const std::vector<double>& fam_sq) {
  // a grad row's floor for its model: few tokens, a family far below the model's gradient (tolerance.h)
  double model_sq = 0, model_n = 0;
  for (size_t g = 0; g < n_fam_; ++g)
    model_sq += fam_sq[static_cast<size_t>(group_family_[g])], model_n += group_elements_[g];
  model_sq_peak_ = std::max(model_sq_peak_, model_sq);  // the model's gradient scale: its largest so far
  const double saturated = saturation_floor(sc_.model.precision(), b.logit_peak, b.logit_grad_rms);
  for (size_t g = 0; g < n_fam_; ++g) {
    const GradientScale gs{fam_sq[static_cast<size_t>(group_family_[g])], group_elements_[g], model_sq_peak_, model_n,
                           static_cast<double>(sc_.model.batch * sc_.model.seq), b.logit_peak,
                           b.logit_grad_rms};
    bounds_[3 + g] = gradient_row_bound(sc_.model.precision(), bounds_[3 + g], gs);
    groups_[g].tol.norm_rel = bounds_[3 + g].value;
    // set_bounds sets the far bound again each step; the gradient the optimizer took is held to it too
    groups_[g].far_bound = saturated_far_bound(groups_[g].far_bound, saturated);
  }
}

template <class T> void Runner<T>::fold_groups(int64_t t, const std::vector<double>& all) {
  const auto upd = update_ratios(all);
  std::vector<std::string> replica_bad;
  int64_t replica_pairs = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<vd::LocalSums> parts;
    for (int r = 0; r < world_.size(); ++r)
      parts.push_back(vd::LocalSums::unpack(wire_.of(all, r, Section::groups) + g * vd::LocalSums::kWidth));
    const vd::GroupStep sums = vd::combine(parts);
    if (g >= n_fam_ && g < 2 * n_fam_ && !sc_.trajectory) {  // param rows: and what the gradients taken explain
      const double x = upd[g - n_fam_][7], ref = std::sqrt(sums.once.ref2);
      bounds_[3 + g] = with_explained(bounds_[3 + g], ref > 0 ? x / ref : x);
      groups_[g].tol.norm_rel = bounds_[3 + g].value;
    }
    vd::Outcome o = vd::group_outcome(groups_[g], sums);
    o.bound = bounds_[3 + g];
    if (g < n_fam_ && o.verdict == RowVerdict::fail) {  // grad rows: the first wrong tensor, backward
      std::vector<size_t> members;
      std::vector<std::string> names;
      for (size_t q = 0; q < group_of_param_.size(); ++q) {
        names.push_back(par_.specs()[q].name);
        if (group_of_param_[q] == g) members.push_back(q);
      }
      const auto fw = verdict_flow::first_wrong(all, wire_.stride(), wire_.at(Section::tensors), world_.size(),
                                                members, names, sc_.model.layers, o.bound.value);
      o.flow = fw.pos, o.flow_tensor = fw.tensor;
    }
    if (g >= n_fam_ && g < 2 * n_fam_) {  // param rows: scale and far elements read on the update
      if (!std::isnan(upd[g - n_fam_][0])) o.scale_ratio = upd[g - n_fam_][0];
      const auto& u = upd[g - n_fam_];  // beside its bound, the far elements the gradients taken explain
      const double far_explained = !sc_.trajectory && u[6] > 0 ? u[8] / u[6] : 0.0;
      vd::check_far(o, u[1], u[2], far_bounds_[g - n_fam_] + far_explained, "of the update");
      // its far elements where reductions keep fp32: under bf16-reduce-bf16 the gradient taken is a
      // bf16 reduction's result, every element of it rounded by the policy (cp2_tp2: 35% far, 2 of 500)
      const auto& k = upd[g - n_fam_];
      // there it is held to the gradient the rank holds instead, each element within T's roundings of the
      // optimizer's arithmetic (verdict_taken.h Held): none may be past it
      const bool held = reduces_in_16_bits();
      const double far_bound = held ? 0.0 : groups_[g - n_fam_].far_bound;
      vd::check_taken(o, k[3], k[4], held ? k[9] : reduced_bounds_[g - n_fam_].value + bounds_[1].value, k[5], k[6],
                      far_bound);
    }
    vd::update_row(rows_[3 + g], t, o);
    replica_pairs += o.replica_pairs;
    if (o.replica_a >= 0)
      replica_bad.push_back(groups_[g].quantity + " " + groups_[g].subject + " on ranks " +
                            std::to_string(o.replica_a) + " and " + std::to_string(o.replica_b));
  }
  for (std::string& d : verdict_state::differing(all, wire_.stride(), wire_.at(Section::state), world_.size(),
                                                 state_keys_.names, replica_pairs))
    replica_bad.push_back(std::move(d));
  vd::update_row(rows_.back(), t, vd::replicas_outcome(replica_bad, replica_pairs));
}

template <class T> void Runner<T>::fold_routes(int64_t t, const std::vector<double>& all, StepLine& line) {
  const size_t n = wire_.counts().tokens, L = wire_.counts().moe_layers;
  for (size_t l = 0; l < L; ++l) {
    std::vector<vd::RouteLocal> parts;
    std::vector<int64_t> cov(n, 0);  // how often the ranks reported each token
    for (int r = 0; r < world_.size(); ++r) {
      parts.push_back(vd::RouteLocal::unpack(wire_.of(all, r, Section::routes) + l * vd::RouteLocal::kWidth));
      const double* reported = wire_.of(all, r, Section::coverage) + l * n;
      for (size_t i = 0; i < n; ++i) cov[i] += static_cast<int64_t>(reported[i]);
    }
    Row& row = rows_[3 + groups_.size() + l];
    vd::Outcome o = vd::routing_outcome(parts, cov, row.subject);
    for (const auto& p : parts)
      line.route_diff += static_cast<int64_t>(p.mismatch), line.near_ties += static_cast<int64_t>(p.followed);
    vd::update_row(row, t, o);
  }
}

template <class T>
void Runner<T>::add_reduction_allowance(const std::vector<double>& all, const std::vector<double>& fam_sq) {
  reduced_bounds_.assign(bounds_.begin() + 3, bounds_.begin() + 3 + static_cast<std::ptrdiff_t>(n_fam_));
  if (!reduces_in_16_bits()) return;  // every allowance is 0
  double allow2 = 0, ref2 = 0;
  for (size_t g = 0; g < n_fam_; ++g) {
    double a2 = 0;
    for (int r = 0; r < world_.size(); ++r)
      a2 += vd::LocalSums::unpack(wire_.of(all, r, Section::groups) + g * vd::LocalSums::kWidth).allow2;
    const double f2 = fam_sq[static_cast<size_t>(group_family_[g])];
    allow2 += a2, ref2 += f2;
    // relative to the family's norm, absolute where it is zero (as the row's error is)
    // not the grad row's: it compares the exact reductions (verdict_part.cpp add_tensors; the trajectory verdict
    // is refused under such a policy, harness/scenario/scenario.cpp)
    reduced_bounds_[g] = with_reduction(bounds_[3 + g], f2 > 0 ? std::sqrt(a2 / f2) : std::sqrt(a2));
  }
  // the grad norm moves by at most the norm of what its elements may move (and the clip coefficient with it)
  const double rel = ref2 > 0 ? std::sqrt(allow2 / ref2) : std::sqrt(allow2);
  bounds_[1] = with_reduction(bounds_[1], rel), bounds_[2] = with_reduction(bounds_[2], rel);
}

// The step's one reduction: every rank's sums on every rank (the rows are folded everywhere), or,
// in a simulated world, on rank 0 alone (an alltoallv to rank 0): there W ranks share one
// process, and W copies of W ranks' sums would be the world's largest allocation. The
// verdict is rank 0's either way (it prints the table and writes the report).
template <class T> std::vector<double> Runner<T>::exchange(const std::vector<double>& mine) {
  const bool root_only = world_.backend() == comm::Backend::sim && world_.size() > 1;
  const size_t w = static_cast<size_t>(world_.size());
  std::vector<double> all(root_only && rank_ != 0 ? 0 : mine.size() * w);
  if (root_only) {
    std::vector<int64_t> send(w, 0), recv(w, rank_ == 0 ? static_cast<int64_t>(mine.size()) : 0);
    send[0] = static_cast<int64_t>(mine.size());
    world_.alltoallv(std::span<const double>(mine), std::span<const int64_t>(send), std::span<double>(all),
                     std::span<const int64_t>(recv));
  } else {
    world_.allgather(std::span<const double>(mine), std::span<double>(all));
  }
  return all;
}

template <class T> void Runner<T>::step(int64_t t, VerdictReport& rep) {
  before_base_ = base_->params_handle();
  std::optional<TracedStep<T>> traced;  // the traced step (trace_run.h)
  if (t == trace_at_) traced.emplace(TracedStep<T>{base_->expert_bias(), {}});
  before_local_.clear();
  for (const Tensor<T>* q : par_.training_refs().params) before_local_.push_back(*q);
  auto t0 = Clock::now();
  const std::shared_ptr<const StepRecord<T>> record = base_->step(t);
  const StepRecord<T>& b = *record;
  // finite: its source checked it (exit 4 on every rank alike; once per host where the file is shared)
  time_.baseline += seconds_since(t0);
  set_bounds(b.noise);
  t0 = Clock::now();
  // near-ties follow the baseline's choice (model/route_oracle.h), within this step's bound
  const RouteOracle oracle{&b.chosen, &b.select_scores,
                           tolerance_for(sc_.model.dtype, Quantity::routing_score).elem_rel, route_tie_, false};
  {  // the first moments before the step (the gradient the optimizer takes: verdict_taken.h)
    ParallelRunState<T> view(par_, *timed_);
    Optimizer<T>* opt = par_.training_refs().opt;
    verdict_taken::before_step<T>(moments_, view.state(), par_.specs(), par_.mesh(), world_.world_rank(),
                                  opt && opt->has_second_moment() ? &opt->second_moment().tensors : nullptr);
    if (carry_pending_) verdict_carry::load(moments_, par_.specs(), opt_.carry_dir), carry_pending_ = false;
  }
  if (copies_) copies_->before_step(par_);  // fp8-delayed: the scales the step quantizes with
  RankStepRecord<T> p;
  {
    const trace::Scope tracing(traced ? &traced->layout : nullptr);
    p = par_.step(t, &oracle);
  }
  time_.parallel += seconds_since(t0);
  t0 = Clock::now();
  // the gradient the optimizer took, as the rank holds it before a harness fault scales what it reports
  // (verdict_taken.h Held: the fault moves the rows it aims at, not the optimizer's consistency with it)
  const bool grad_fault = opt_.fault && opt_.fault->target != Fault::Target::param &&
                          opt_.fault->target != Fault::Target::loss && opt_.fault->target != Fault::Target::grad_norm;
  held_grads_ = grad_fault ? p.grads : std::vector<Tensor<T>>{};
  apply_fault(p);
  const std::vector<double> mine = part(b, p);
  time_.compare += seconds_since(t0);
  t0 = Clock::now();
  const std::vector<double> all = exchange(mine);
  time_.compare_comm += seconds_since(t0);
  t0 = Clock::now();
  if (!all.empty()) fold(t, b, all, rep);  // every rank, or rank 0 alone (exchange)
  if (traced) traced_ = traced->fold(sc_, world_, par_.mesh(), b, *before_base_, trace_param_bound());
  if (!sc_.trajectory) continue_from_baseline();  // compared above, every piece it overwrites
  time_.compare += seconds_since(t0);
}

// The step-local verdict (docs/verdict.md "Step-local and trajectory"): once step t is
// compared, this rank's parameter shards and expert biases become the baseline's after step t,
// so the next step's error is that step's rounding alone. Both were compared first (the param
// rows, on the parameters and on the update; the expert_bias row) and the replicas row read
// this rank's own copies; the optimizer state (moments, step count) stays the layout's own, so
// a step that carries it wrong still fails the param rows of the step after.
template <class T> void Runner<T>::continue_from_baseline() {
  TrainingRefs<T> refs = par_.training_refs();
  const auto& full = base_->params();
  for (size_t p = 0; p < refs.params.size() && p < full.size() && p < idx_.size(); ++p) {
    Tensor<T>& mine = *refs.params[p];
    if (mine.data.size() != idx_[p].size()) continue;  // a shape the param row failed already
    const T* src = full[p].ptr();
    for (size_t i = 0; i < idx_[p].size(); ++i) mine.data[i] = src[idx_[p][i]];
  }
  if (refs.expert_bias == nullptr) return;
  const auto& bias = base_->expert_bias();
  for (size_t l = 0; l < refs.expert_bias->size() && l < bias.size(); ++l)
    if ((*refs.expert_bias)[l].size() == bias[l].size()) (*refs.expert_bias)[l] = bias[l];
}

template <class T> int64_t Runner<T>::resume(const std::string& dir) {
  auto t0 = Clock::now();
  const ckpt::CheckpointInfo info =
      ParallelRunState<T>(par_, *timed_).load(dir, scenario_to_json(sc_)["model"], checkpoint_run(sc_));
  time_.parallel += seconds_since(t0);
  if (info.step > sc_.steps)
    throw ConfigError("--resume", dir + " was saved after step " + std::to_string(info.step) +
                                      ", beyond the run's last step (steps = " + std::to_string(sc_.steps) + ")");
  t0 = Clock::now();
  base_->skip_to(info.step);  // the steps before: replayed (or read), not compared
  time_.baseline += seconds_since(t0);
  carry_pending_ = !opt_.carry_dir.empty();  // a resume check's phase 2: phase 1's moments (verdict_carry.h)
  return info.step;
}

template <class T> void Runner<T>::save(const std::string& dir, int64_t done) {
  const auto t0 = Clock::now();
  ParallelRunState<T>(par_, *timed_)
      .save(dir, {done, data_position_after(sc_.model, done), scenario_to_json(sc_)["model"], checkpoint_run(sc_)});
  time_.parallel += seconds_since(t0);
  if (!opt_.carry_dir.empty()) verdict_carry::save(moments_, par_.specs(), opt_.carry_dir, world_.world_rank());
}

}  // namespace verdict_runner

using verdict_runner::Runner;
namespace vd = verdict_detail;
using Clock = std::chrono::steady_clock;

namespace {

// Every step of s trained and compared under `run`, into rep (resumed and saved as o says); after a step, once any
// checkpoint is saved, `enough` (every rank alike) may end it early.
template <class T>
void compare_steps(Runner<T>& run, const Scenario& s, const VerdictOptions& o, VerdictReport& rep,
                   const std::function<bool()>& enough = {}) {
  if (!o.resume_dir.empty()) {
    rep.first_step = run.resume(o.resume_dir);
    rep.checkpoint = "resumed from " + o.resume_dir + " at step " + std::to_string(rep.first_step) +
                     " (baseline steps 0.." + std::to_string(rep.first_step - 1) + " replayed, not compared)";
  }
  if (o.save_at >= 0 && (o.save_at < rep.first_step || o.save_at > s.steps))
    throw ConfigError("--save-at", "must be in [" + std::to_string(rep.first_step) + ", steps = " +
                                       std::to_string(s.steps) + "], got " + std::to_string(o.save_at));
  for (int64_t t = rep.first_step;; ++t) {
    if (t == o.save_at) {
      run.save(o.ckpt_dir, t);
      rep.checkpoint += std::string(rep.checkpoint.empty() ? "" : "; ") + "saved to " + o.ckpt_dir + " after " +
                        std::to_string(t) + " steps";
    }
    if (t >= s.steps) break;
    run.step(t, rep);
    if (enough && (o.save_at < 0 || o.save_at <= t) && t + 1 < s.steps && enough()) break;
  }
}

}  // namespace

bool measure_again_enabled() { return knob_on("PARITY_MEASURE_AGAIN"); }

namespace {

// Measured again (docs/verdict.md "Measured again"): a verdict that fails at rounding level (verdict_root.h
// RootCause::rounding: every row failing at the root's step within kRoundingLevel of its bound, no clean
// factor) is measured once more with twin_sets_again() disjoint sets of twins, the first set among them. The
// noise is each value's largest over the twins, so the second verdict is the verdict of that larger ensemble:
// a pass under the first set passes under it too, and only a failure pays for it. Rank 0's rows decide for
// every rank (one collective); one that would not fit in memory is not (each rank trains its own baseline and twins:
// the host's shared one is the first set's), and the report says so. Returns whether to measure again, and what
// the report says ("the first measurement ...", or "not measured again ..."; rank 0's, "" elsewhere).
std::pair<bool, std::string> measure_again(comm::Communicator& world, const Scenario& s, const VerdictReport& rep,
                                           const std::vector<Row>& rows, bool enabled) {
  // what every rank knows alike: no collective (and no copy) where nothing could be measured again
  const int64_t sets = twin_sets_again(s.model.precision());
  if (!enabled || s.twin_sets > 1 || sets <= 1 || !rep.compared())
    return {false, ""};
  double again = 0;
  std::string why;
  if (world.rank() == 0) {
    VerdictReport first = rep;
    first.rows = rows;
    const RootCause root = find_root(first);
    if (!first.passed() && root.rounding) {
      const int64_t n = twin_count(s.model.precision(), static_cast<double>(s.model.batch * s.model.seq * s.model.dim));
      std::string line = root_line(first, root);
      if (!line.empty() && line.back() == '\n') line.pop_back();
      const std::string memory = measured_again_memory(s, n * sets);
      again = memory.empty() ? 1 : 0;
      why = again > 0 ? "the first measurement (" + std::to_string(n) + (n == 1 ? " twin" : " twins") +
                            ") failed at rounding level, " + line + "; this verdict is the one of " +
                            std::to_string(n * sets) + " twins"
                      : "not measured again (a failure at rounding level): " + memory;
    }
  }
  std::vector<double> v{again};
  world.allreduce(std::span<double>(v), comm::ReduceOp::max);
  return {v[0] > 0, why};
}

// The noise of the twins over every step of the run, each value's largest (a measured-again verdict under the
// step-local mode, docs/verdict.md "Measured again"): each step's twins start from the baseline's parameters,
// so what they measure does not depend on the layout, and every step is one sample of one step's rounding.
// Rank 0 trains the baseline and its twins once, before the second runner takes its memory; one allreduce
// gives every rank the same values (the others add exact zeros; NaN: unmeasured).
template <class T> std::vector<double> whole_run_noise(comm::Communicator& world, const Scenario& s) {
  std::vector<double> most(kNoiseWidth, world.rank() == 0 ? std::numeric_limits<double>::quiet_NaN() : 0.0);
  if (world.rank() == 0) {
    auto src = make_baseline_source<T>(s, 0, "");
    for (int64_t t = 0; t < s.steps; ++t) {
      const std::vector<double>& n = src->step(t)->noise;
      for (size_t i = 0; i < n.size() && i < most.size(); ++i) most[i] = std::fmax(most[i], n[i]);
    }
  }
  world.allreduce(std::span<double>(most), comm::ReduceOp::sum);
  return most;
}

}  // namespace

template <class T> VerdictReport run_verdict(const Scenario& s, comm::Communicator& world, const VerdictOptions& o) {
  const bool again_enabled = measure_again_enabled();  // before any work; every rank alike
  VerdictReport rep;
  rep.scenario = s.name, rep.dtype = std::string(dtype_name(s.model.dtype));
  rep.precision = precision_name(s.model.precision());
  rep.backend = std::string(comm::backend_name(world.backend()));
  rep.degrees = layout_factors(s.layout, s.model.microbatches);
  rep.layout = describe_layout(s.layout, LayoutText::report), rep.world = world.size(), rep.steps = s.steps;
  rep.fault = vd::fault_desc(o.fault);
  if (const std::string inj = injected_names(); !inj.empty())
    rep.fault += (rep.fault.empty() ? "" : ", ") + std::string("inject ") + inj;
  rep.optim = vd::optim_desc(s.optim);
  rep.mode = s.trajectory ? "trajectory" : "step-local";
  const VerdictReport head = rep;
  // Floors first (floors_first.h): the first measurement without a twin where the floors alone can pass it.
  Scenario first_s = s;  // a Runner holds its scenario by reference: each alive as long as the last Runner
  first_s.twin_sets = first_twin_sets(s);
  auto t0 = Clock::now();
  auto run = std::make_unique<Runner<T>>(first_s, world, o);
  run->time().startup = o.startup_s, run->time().rendezvous = o.rendezvous_s, run->time().setup = seconds_since(t0);
  // a first measurement without a twin ends at the first step that fails its floors: the second decides
  const auto floors_fail = [&] { return floors_failed(world, rep, run->rows()).first; };
  compare_steps(*run, first_s, o, rep, first_s.twin_sets == 0 ? std::function<bool()>(floors_fail) : nullptr);
  // A second measurement of the same layout (its checkpoint saved by the first): `sc` with `opt`, into rep.
  const auto measure_second = [&](const Scenario& sc, const VerdictOptions& opt, std::string why,
                                  std::vector<double> seed) {
    const Timings first = run->time();
    const std::string saved = rep.checkpoint;
    run.reset();  // its memory back before the second runner takes as much
    rep = head;
    rep.remeasured = std::move(why);
    t0 = Clock::now();
    run = std::make_unique<Runner<T>>(sc, world, opt);
    run->seed_noise(std::move(seed));
    Timings& tm = run->time();
    tm.startup = first.startup, tm.rendezvous = first.rendezvous, tm.setup = first.setup + seconds_since(t0);
    compare_steps(*run, sc, opt, rep);
    tm.baseline += first.baseline, tm.parallel += first.parallel, tm.compare += first.compare;
    tm.compare_comm += first.compare_comm;
    rep.checkpoint = saved;
  };
  VerdictOptions second_o = o;
  second_o.save_at = -1, second_o.ckpt_dir.clear();  // saved already: the layout computes the same again
  std::unique_ptr<BaselineProducer> second_baseline;  // the host's, where this rank trains it (every step read by
                                                      // the time it goes, at the return)
  if (first_s.twin_sets == 0) {
    auto [failed, why] = floors_failed(world, rep, run->rows());
    if (failed) {
      second_baseline = share_second(world, s, o.resume_dir.empty() ? o.baseline_file : "",
                                     verdict_runner::local_slot(world.rank()), second_o.baseline_file);
      measure_second(s, second_o, "", {});
      rep.twin = std::move(why);
    } else {
      rep.twin = "not run: every row is within its floor, which a twin's measure could only widen (floors first; "
                 "PARITY_FLOORS_FIRST=0 runs it)";
    }
  }
  Scenario again_s = s;
  auto [measure, why] = measure_again(world, s, rep, run->rows(), again_enabled);
  if (!measure) rep.remeasured = why;  // "" or why it was not
  if (measure) {
    again_s.twin_sets = twin_sets_again(s.model.precision());
    VerdictOptions again_o = second_o;
    again_o.baseline_file.clear();  // a baseline of its own: the host's shared one has the first set of twins
    std::vector<double> seed;
    if (!s.trajectory && o.resume_dir.empty()) seed = whole_run_noise<T>(world, again_s);  // every step's bound
    measure_second(again_s, again_o, std::move(why), std::move(seed));
  }
  if (const int64_t tt = step_to_trace(world, run->rows(), o.trace); tt >= 0) {
    VerdictOptions trace_o = second_o;  // a baseline of its own: the host's shared one has recycled its steps' blocks
    trace_o.baseline_file.clear();
    Runner<T> again(again_s, world, trace_o);  // the first failing step again, traced (harness/runner/trace_run.h)
    again.trace_at(std::max(tt, rep.first_step));
    VerdictReport scratch;
    for (int64_t t = o.resume_dir.empty() ? 0 : again.resume(o.resume_dir); t <= std::max(tt, rep.first_step); ++t)
      again.step(t, scratch);
    rep.trace_root = again.traced().found ? again.traced().root : "", rep.trace_lines = again.traced().lines;
    rep.trace_placements = again.traced().placements;
    rep.trace_reduced = again.traced().reduced;
  }
  rep.rows = run->rows();
  std::stable_sort(rep.rows.begin(), rep.rows.end(), [](const Row& a, const Row& b) {
    return static_cast<int>(a.verdict) < static_cast<int>(b.verdict);
  });
  gather_timings(world, run->time(), rep);
  return rep;
}

template VerdictReport run_verdict<float>(const Scenario&, comm::Communicator&, const VerdictOptions&);
template VerdictReport run_verdict<double>(const Scenario&, comm::Communicator&, const VerdictOptions&);

}  // namespace parity
