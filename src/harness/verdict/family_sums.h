// The baseline's per-family sums that a step's rows read besides the compared elements: the
// squared norm of each family's gradient (the grad_norm row's families, tolerance.h
// GradientScale) and each family group's magnitude (is_far's floor: the root mean square of the
// baseline's whole family, a gradient's at least gradient_magnitude's share of the model's).
// One implementation for `parity run`'s ranks (harness/runner/verdict_part.cpp, on the
// baseline's whole tensors) and `parity compare` (dump_compare.cpp, on the reference dump's):
// each tensor's sum of squares (optim.h sum_of_squares), added in parameter order, so both sides
// get the same bits from the same tensors.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/tensor.h"
#include "harness/verdict/tolerance.h"
#include "model/params.h"
#include "optim/optimizer.h"

namespace parity::family_sums {

// Sums of squares per family group (verdict_detail.h VerdictLayout), over the tensors added.
class GroupSquares {
 public:
  explicit GroupSquares(size_t groups) : sq_(groups, 0.0), n_(groups, 0.0) {}
  // One baseline tensor of group g, in parameter order: its sum of squares and its element count.
  void add_tensor(size_t g, double sq, double elements) {
    sq_[g] += sq, n_[g] += elements, all_sq_ += sq, all_n_ += elements;
  }
  // One element x of group g, summed as it is formed (the update, after - before).
  void add_element(size_t g, double x) { sq_[g] += x * x, n_[g] += 1; }
  double sq(size_t g) const { return sq_[g]; }
  double rms(size_t g) const { return n_[g] > 0 ? std::sqrt(sq_[g] / n_[g]) : 0.0; }
  // Over every tensor added (add_tensor), in the order added; at least the peak held (hold_model_peak).
  double model_rms() const { return all_n_ > 0 ? std::sqrt(std::max(all_sq_, peak_sq_) / all_n_) : 0.0; }
  // The model's gradient scale for a dead family's elements is its largest so far, as its row's floor
  // takes it (tolerance.h gradient_magnitude): peak_sq becomes the largest of itself and this step's.
  void hold_model_peak(double& peak_sq) {
    peak_sq_ = peak_sq = std::isfinite(all_sq_) ? std::max(peak_sq, all_sq_) : peak_sq;
  }
  // is_far's magnitude floor of group g's elements: its root mean square; a gradient's
  // (model = true) at least gradient_magnitude's share of the model's (tolerance.h).
  double floor(size_t g, bool model) const { return gradient_magnitude(rms(g), model ? model_rms() : 0.0); }

 private:
  std::vector<double> sq_, n_;
  double all_sq_ = 0, all_n_ = 0, peak_sq_ = 0;
};

// Per Family (kFamilyCount, Family order): the parameters' sums of squares (one per spec),
// added in parameter order.
inline std::vector<double> per_family(const std::vector<ParamSpec>& specs, const std::vector<double>& tensor_sq) {
  std::vector<double> out(kFamilyCount, 0.0);
  for (size_t p = 0; p < specs.size() && p < tensor_sq.size(); ++p)
    out[static_cast<size_t>(specs[p].family)] += tensor_sq[p];
  return out;
}

// The baseline's sums of one step over its whole model that every rank's verdict reads: the
// floors of is_far (verdict_part.cpp add_tensors, add_update_sums), the grad_norm row's families
// (per_family) and the taken gradient's scales (verdict_taken.h append_sums). The shared
// baseline's producer forms them once per host and writes them into the step's block
// (shared_baseline.cpp); a rank with a baseline of its own forms them itself. One
// implementation (step_sums), so the same bits either way.
struct StepSums {
  double clip = 1, wd = 0;        // the clip coefficient and the moment's weight decay taken_sq was formed with
  std::vector<size_t> group_of;   // per parameter: the family group it was summed into (verdict_layout)
  std::vector<double> grad_sq;    // per parameter: the gradient's sum of squares (optim.h sum_of_squares)
  std::vector<double> param_sq;   // per parameter: the parameter's after the step
  std::vector<double> update_sq;  // per group: the update's (after - before) squares, element by element
  std::vector<double> n;          // per group: its elements
  std::vector<double> taken_sq;   // per group: (clip x gradient + wd x before)^2, element by element
  // Formed with these (a rank whose clip, decay or groups differ forms its own).
  bool fits(double c, double w, const std::vector<size_t>& groups) const {
    return clip == c && wd == w && group_of == groups;
  }
};

// The weight decay the optimizer's first moment takes with the gradient (verdict_taken.h): sgd's
// and adam's; adamw decays the parameter, not the moment.
inline double moment_decay(const OptimConfig& o) { return o.kind == OptimKind::adamw ? 0.0 : o.weight_decay; }

// The sums of a step from the baseline's gradient, its parameters before and after the step, in
// parameter order then element order (the order the ranks always summed in).
template <class T>
StepSums step_sums(const std::vector<Tensor<T>>& grads, const std::vector<Tensor<T>>& before,
                   const std::vector<Tensor<T>>& after, double clip, double wd, const std::vector<size_t>& group_of,
                   size_t groups) {
  StepSums s;
  s.clip = clip, s.wd = wd, s.group_of = group_of;
  for (const auto& t : grads) s.grad_sq.push_back(sum_of_squares(t.ptr(), t.numel()));
  for (const auto& t : after) s.param_sq.push_back(sum_of_squares(t.ptr(), t.numel()));
  s.update_sq.assign(groups, 0.0), s.n.assign(groups, 0.0), s.taken_sq.assign(groups, 0.0);
  for (size_t p = 0; p < group_of.size() && p < grads.size() && p < before.size() && p < after.size(); ++p) {
    const size_t g = group_of[p];
    const T *d = grads[p].ptr(), *w0 = before[p].ptr(), *w1 = after[p].ptr();
    const auto k = static_cast<size_t>(std::min({grads[p].numel(), before[p].numel(), after[p].numel()}));
    double sq = s.taken_sq[g], usq = s.update_sq[g], n = s.n[g];
    for (size_t j = 0; j < k; ++j) {
      const double r = clip * static_cast<double>(d[j]) + wd * static_cast<double>(w0[j]);
      const double u = static_cast<double>(w1[j]) - static_cast<double>(w0[j]);
      sq += r * r, usq += u * u, n += 1;
    }
    s.taken_sq[g] = sq, s.update_sq[g] = usq, s.n[g] = n;
  }
  return s;
}

}  // namespace parity::family_sums
