// This rank's part of a verdict step (verdict_wire.h): every local element of its gradients and
// parameters against the baseline's of the same global index, the updates and the gradients the
// optimizer took, packed section by section for the step's one exchange (verdict_run.cpp folds them).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>

#include "ckpt/training_state.h"
#include "harness/runner/verdict_runner.h"
#include "harness/verdict/family_sums.h"
#include "harness/verdict/tolerance.h"
#include "harness/verdict/verdict_flow.h"

namespace parity::verdict_runner {

// Every local element against the baseline's element of the same global index.
template <class T>
void Runner<T>::add_tensors(std::vector<vd::LocalSums>& acc, size_t offset, const std::vector<Tensor<T>>& got,
                            const std::vector<Tensor<T>>& ref, const std::vector<double>& ref_sq,
                            const std::vector<Tensor<T>>& mag, const std::vector<Tensor<T>>* exact) {
  std::vector<int64_t> pos(n_fam_, 0);  // tensor index inside its group
  // is_far's magnitude floor: the root mean square of the baseline's whole family (a tensor
  // that is all but zero next to its family, a gradient that vanishes, has no far elements);
  // gradients: a family far below the model's scale (family_sums.h, tolerance.h gradient_magnitude).
  // ref_sq: each ref tensor's sum of squares (StepSums)
  family_sums::GroupSquares floors(n_fam_);
  for (size_t p = 0; p < ref.size(); ++p)
    floors.add_tensor(group_of_param_[p], p < ref_sq.size() ? ref_sq[p] : sum_of_squares(ref[p].ptr(), ref[p].numel()),
                      static_cast<double>(ref[p].numel()));
  if (offset == 0) floors.hold_model_peak(far_model_sq_peak_);  // the model's largest scale so far, as the floor's
  for (size_t p = 0; p < ref.size(); ++p) {
    const size_t g = group_of_param_[p];
    const int64_t tensor_id = pos[g]++;
    vd::LocalSums& s = acc[offset + g];
    const auto& idx = offset == 0 ? gidx_[p] : idx_[p];  // offset 0: the gradients
    const char counted = offset == 0 ? gcounted_[p] : counted_[p];
    if (p >= got.size() || got[p].data.size() != idx.size()) {
      s.shape_bad += 1;
      continue;
    }
    const T* r = ref[p].ptr();
    const T* x = got[p].ptr();
    const double rms = floors.floor(g, offset == 0);
    const bool has_a = p < mag.size() && mag[p].data.size() == idx.size();
    const bool has_e = exact && p < exact->size() && (*exact)[p].data.size() == idx.size();
    if (exact && !(has_a && has_e))
      throw Error("verdict: the exact reductions of " + par_.specs()[p].name + " are missing");
    const T* a = has_a ? mag[p].ptr() : nullptr;
    const T* e = has_e ? (*exact)[p].ptr() : nullptr;
    s.add_digests(offset == 0 ? gikey_[p] : ikey_[p], idx.size(), [x](size_t i) { return static_cast<double>(x[i]); });
    for (size_t i = 0; i < idx.size() && !has_e; ++i)
      s.add_element(tensor_id, idx[i], static_cast<double>(x[i]), static_cast<double>(r[idx[i]]), counted != 0, rms);
    // Under bf16-reduce-bf16: the reductions' exact result against the baseline's gradient
    // before its rounding (ref), as bf16's rows compare them, where the rank's rounded value is within
    // what the policy's roundings may move it (kReduceRounding x its partials' magnitude: exact bounds,
    // no sample); a rounding past that is a bug, and the rounded value is compared instead. The norm of
    // the allowances still goes to the grad norm, taken from the rounded gradients (allow2).
    for (size_t i = 0; i < idx.size() && has_e; ++i) {
      const double held = static_cast<double>(x[i]), ex = static_cast<double>(e[i]);
      const double allow = kReduceRounding * static_cast<double>(a[i]);
      const double v = std::abs(held - ex) <= allow ? ex : held;
      s.add_element(tensor_id, idx[i], v, static_cast<double>(r[idx[i]]), counted != 0, rms);  // digests: held
      if (counted) s.allow2 += allow * allow;
    }
  }
}

// Which family a wrong grad norm comes from: the layout's squared norm per family (got, the
// same on every rank) against the baseline's, as "router x4.000" (of the squared norm).
template <class T> std::vector<double> Runner<T>::family_norm_sq(const StepRecord<T>& b) {
  return family_sums::per_family(b.grads->specs, sums_of(b).grad_sq);
}
// The same of the baseline's gradients before the policy's 16-bit rounding (StepRecord::grads_exact).
template <class T> std::vector<double> Runner<T>::family_norm_sq_exact(const StepRecord<T>& b) {
  std::vector<double> sq;
  for (const Tensor<T>& t : b.grads_exact->tensors) sq.push_back(sum_of_squares(t.ptr(), t.numel()));
  return family_sums::per_family(b.grads_exact->specs, sq);
}

// Step b's baseline sums over the whole model (family_sums.h): the source's where it formed them
// with this rank's clip coefficient, decay and groups (the shared baseline's producer), else
// formed here from the same tensors in the same order: the same bits.
template <class T> const family_sums::StepSums& Runner<T>::sums_of(const StepRecord<T>& b) {
  if (sums_ && sums_step_ == b.step) return *sums_;
  const double wd = family_sums::moment_decay(sc_.optim);
  const auto& s = b.sums;
  if (s && s->fits(b.clip_coef, wd, group_of_param_) && s->n.size() == n_fam_ &&
      s->grad_sq.size() == b.grads->tensors.size() && s->param_sq.size() == base_->params().size()) {
    sums_ = s;
  } else {
    static const std::vector<Tensor<T>> none;
    sums_ = std::make_shared<const family_sums::StepSums>(family_sums::step_sums(
        b.grads->tensors, before_base_ ? *before_base_ : none, base_->params(), b.clip_coef, wd, group_of_param_,
        n_fam_));
  }
  sums_step_ = b.step;
  return *sums_;
}


// This rank's part from Section::scalars to Section::routes: loss, grad_norm, clip_coef, norm^2 per family,
// micro losses, every group's sums, every MoE layer's routing.
template <class T>
void Runner<T>::local_part(const StepRecord<T>& b, const RankStepRecord<T>& p, std::vector<double>& out) {
  wire_.expect(out, Section::scalars);
  out.insert(out.end(), {p.loss, p.grad_norm, p.clip_coef, p.loss_scale, p.skipped ? 1.0 : 0.0});
  wire_.expect(out, Section::family_norm_sq);
  for (size_t f = 0; f < kFamilyCount; ++f)
    out.push_back(f < p.norm_sq_by_family.size() ? p.norm_sq_by_family[f] : std::numeric_limits<double>::quiet_NaN());
  for (size_t f = 0; f < kFamilyCount; ++f)  // NaN where the grad rows compare the rounded gradients
    out.push_back(f < p.norm_sq_by_family_exact.size() ? p.norm_sq_by_family_exact[f]
                                                       : std::numeric_limits<double>::quiet_NaN());
  wire_.expect(out, Section::micro_losses);
  for (size_t m = 0; m < b.micro_losses.size(); ++m)
    out.push_back(m < p.micro_losses.size() ? p.micro_losses[m] : std::numeric_limits<double>::quiet_NaN());
  std::vector<vd::LocalSums> acc(groups_.size());
  const family_sums::StepSums& sums = sums_of(b);
  const bool exact = exact_grads(b, p);
  add_tensors(acc, 0, p.grads, exact ? b.grads_exact->tensors : b.grads->tensors, sums.grad_sq, p.grad_magnitude,
              exact ? &p.grads_exact : nullptr);
  add_tensors(acc, n_fam_, p.params, base_->params(), sums.param_sq);
  const ModelConfig& c = sc_.model;
  const auto L = static_cast<size_t>(c.moe_layers());
  if (L > 0) {
    vd::LocalSums& tpe = acc[2 * n_fam_];
    vd::LocalSums& bias = acc[2 * n_fam_ + 1];
    for (size_t l = 0; l < L; ++l) {
      const auto& bt = b.tokens_per_expert[l];
      const auto& bb = base_->expert_bias()[l];
      const bool tpe_ok = l < p.tokens_per_expert.size() && p.tokens_per_expert[l].size() == bt.size();
      const bool bias_ok = l < p.expert_bias.size() && p.expert_bias[l].size() == bb.size();
      tpe.shape_bad += tpe_ok ? 0 : 1, bias.shape_bad += bias_ok ? 0 : 1;
      for (size_t e = 0; tpe_ok && e < bt.size(); ++e)
        tpe.add(static_cast<int64_t>(l), static_cast<int64_t>(e), static_cast<double>(p.tokens_per_expert[l][e]),
                static_cast<double>(bt[e]), rank_ == 0);
      for (size_t e = 0; bias_ok && e < bb.size(); ++e)
        bias.add(static_cast<int64_t>(l), static_cast<int64_t>(e), static_cast<double>(p.expert_bias[l][e]),
                 static_cast<double>(bb[e]), rank_ == 0);
    }
  }
  wire_.expect(out, Section::groups);
  for (const auto& s : acc) s.pack(out);
  wire_.expect(out, Section::routes);
  const double tie = tolerance_for(c.dtype, Quantity::routing_score).elem_rel;
  for (size_t l = 0; l < L; ++l) {
    static const std::vector<int64_t> none;
    const auto& ids = l < p.token_ids.size() ? p.token_ids[l] : none;
    const auto& ch = l < p.chosen.size() ? p.chosen[l] : none;
    vd::RouteLocal rl =
        vd::compare_routes(ids, ch, b.chosen[l], b.select_scores[l], c.top_k, c.experts, tie, route_tie_);
    rl.followed = l < p.followed.size() ? static_cast<double>(p.followed[l]) : 0.0;
    rl.pack(out);
  }
}

// Per param group, over the elements this rank counts: the UpdateSums of (after - before) against
// the baseline's (after - before), then the taken gradient's sums, appended to out (Section::updates).
template <class T>
void Runner<T>::add_update_sums(const RankStepRecord<T>& p, const family_sums::StepSums& sums,
                                const std::vector<double>& taken, std::vector<double>& out) {
  std::vector<verdict_wire::UpdateSums> u(n_fam_);
  const auto& ref_after = base_->params();
  family_sums::GroupSquares mag(n_fam_);  // the baseline's update, per family (is_far's floor; StepSums)
  for (size_t g = 0; g < n_fam_; ++g) mag.add_tensor(g, sums.update_sq[g], sums.n[g]);
  for (size_t q = 0; q < idx_.size() && q < p.params.size() && q < before_local_.size(); ++q) {
    if (!counted_[q] || p.params[q].data.size() != idx_[q].size() || before_local_[q].data.size() != idx_[q].size())
      continue;
    const size_t g = group_of_param_[q];
    const T *x1 = p.params[q].ptr(), *x0 = before_local_[q].ptr();
    const T *r1 = ref_after[q].ptr(), *r0 = (*before_base_)[q].ptr();
    const double rms = mag.rms(g);
    // summed in a local (the same order, the same bits): u[g] in memory is a chain through every element
    verdict_wire::UpdateSums loc = u[g];
    const int64_t* j_of = idx_[q].data();
    for (size_t i = 0, n = idx_[q].size(); i < n; ++i) {
      const auto j = j_of[i];
      const double x = static_cast<double>(x1[i]) - static_cast<double>(x0[i]);
      const double r = static_cast<double>(r1[j]) - static_cast<double>(r0[j]);
      loc.add(x, r, rms);
    }
    u[g] = loc;
  }
  for (size_t g = 0; g < n_fam_; ++g) {
    u[g].pack(out);
    out.insert(out.end(), taken.begin() + static_cast<std::ptrdiff_t>(verdict_taken::kWidth * g),
               taken.begin() + static_cast<std::ptrdiff_t>(verdict_taken::kWidth * (g + 1)));
  }
}

// The world's update ratio per param group (NaN where the baseline did not move).
template <class T>
std::vector<std::array<double, 10>> Runner<T>::update_ratios(const std::vector<double>& all) const {
  std::vector<std::array<double, 10>> out(n_fam_);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (size_t g = 0; g < n_fam_; ++g) {
    verdict_wire::UpdateSums u;
    NormSums k;
    double kfar = 0, kcount = 0, kread = 0, kexpl = 0, kexfar = 0;
    for (int r = 0; r < world_.size(); ++r) {
      const double* x = wire_.of(all, r, Section::updates) + kUpdateWidth * g;
      u.add(verdict_wire::UpdateSums::unpack(x));
      x += verdict_wire::UpdateSums::kWidth;  // the taken gradient's sums (verdict_taken.h)
      k.add(NormSums{x[0], x[1], x[2]});
      kfar += x[3], kcount += x[4], kread += x[5], kexpl += x[6], kexfar += x[7];
    }
    const NormSums& s = u.update;
    const bool taken = k.ref2 > 0 || k.diff2 > 0;
    // what reading the gradient back from the moment may round, taken off its error; against the
    // gradient held (a 16-bit reduction's policy), that is the bound itself (the tenth)
    const bool held = reduces_in_16_bits();
    const double read = std::sqrt(kread), err = std::max(0.0, std::sqrt(k.diff2) - (held ? 0.0 : read));
    const double ref = std::sqrt(k.ref2), rel = k.ref2 > 0 ? err / ref : err;
    out[g] = {s.ref2 > 0 ? s.scale_ratio() : nan, u.far, u.count, taken ? rel : nan,
              k.ref2 > 0 ? k.scale_ratio() : nan, kfar, kcount, std::sqrt(kexpl), kexfar,
              held ? (k.ref2 > 0 ? read / ref : read) : nan};
  }
  return out;
}

// This rank's part of step t (verdict_wire.h), section by section: the scalars to the routes
// (local_part), the tokens it reported, the optimizer state's digests (the replicas row), each
// gradient tensor's sums (the first wrong tensor), the update's and the taken gradient's sums.
template <class T> std::vector<double> Runner<T>::part(const StepRecord<T>& b, const RankStepRecord<T>& p) {
  ParallelRunState<T> view(par_, *timed_);
  const ckpt::ShardedState st = view.state();
  const ModelConfig& c = sc_.model;
  const auto n = static_cast<size_t>(c.batch * c.seq), L = static_cast<size_t>(c.moe_layers());
  if (!keyed_) {
    state_keys_ = verdict_state::entry_keys(st, par_.mesh(), world_.world_rank()), keyed_ = true;
    wire_ = verdict_wire::Layout({b.micro_losses.size(), groups_.size(), L, n, state_keys_.names.size(),
                                  idx_.size(), n_fam_, verdict_taken::kWidth, copies_ ? idx_.size() : 0});
  }
  std::vector<double> mine;
  local_part(b, p, mine);
  wire_.expect(mine, Section::coverage);
  const size_t c0 = mine.size();
  mine.resize(c0 + L * n, 0.0);  // per layer (n): how often this rank reported each token
  for (size_t l = 0; l < L && l < p.token_ids.size(); ++l)
    for (int64_t id : p.token_ids[l])
      if (id >= 0 && static_cast<size_t>(id) < n) mine[c0 + l * n + static_cast<size_t>(id)] += 1;
  wire_.expect(mine, Section::state);
  verdict_state::append_digests(st, state_keys_, mine);
  std::vector<double> taken;  // the gradient the optimizer took, per param group (verdict_taken.h)
  if (b.skipped)  // fp16: the baseline skipped the step, no optimizer step took a gradient (the moments stay)
    taken.assign(verdict_taken::kWidth * n_fam_, 0.0);
  else {  // under a 16-bit reduction: against the gradient this rank holds (verdict_taken.h Held)
    const verdict_taken::Held<T> held{held_grads_.empty() ? &p.grads : &held_grads_, &gidx_, p.clip_coef};
    verdict_taken::append_sums<T>(moments_, st, par_.specs(), sc_.optim, b.clip_coef, b.grads->tensors,
                                  *before_base_, base_->params(), group_of_param_, n_fam_, taken, &sums_of(b),
                                  reduces_in_16_bits() ? &held : nullptr);
  }
  wire_.expect(mine, Section::tensors);
  const bool exact = exact_grads(b, p);  // the first wrong tensor, as the grad rows compare
  verdict_flow::append_tensor_sums(exact ? p.grads_exact : p.grads, exact ? b.grads_exact->tensors : b.grads->tensors,
                                   gidx_, gcounted_, mine);
  wire_.expect(mine, Section::updates);
  add_update_sums(p, sums_of(b), taken, mine);
  wire_.expect(mine, Section::copies);  // the compute copies (harness/verdict/compute_copy.h)
  if (copies_) copies_->append(par_, *before_base_, before_local_, idx_, mine);
  wire_.expect_whole(mine, 1);
  return mine;
}

// The runner's members defined here (run_verdict instantiates those of verdict_run.cpp).
template class Runner<float>;
template class Runner<double>;

}  // namespace parity::verdict_runner
