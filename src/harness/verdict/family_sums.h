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

#include "harness/verdict/tolerance.h"
#include "model/params.h"

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

}  // namespace parity::family_sums
