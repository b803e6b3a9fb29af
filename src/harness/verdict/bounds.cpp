// Measured bounds per row and step (bounds.h).
#include "harness/verdict/bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace parity {

std::string noise_name(size_t i) {
  auto fam = [](size_t f) { return std::string(family_name(static_cast<Family>(f))); };
  if (i == kNoiseLoss) return "loss";
  if (i == kNoiseGradNorm) return "grad_norm";
  if (i >= kNoiseGrad && i < kNoiseParam) return "grad." + fam(i - kNoiseGrad);
  if (i >= kNoiseParam && i < kNoiseBias) return "param." + fam(i - kNoiseParam);
  if (i == kNoiseBias) return "expert_bias";
  if (i == kNoiseRoute) return "routing";
  if (i >= kNoiseFarGrad && i < kNoiseFarParam) return "far.grad." + fam(i - kNoiseFarGrad);
  if (i >= kNoiseFarParam && i < kNoiseWidth) return "far.param." + fam(i - kNoiseFarParam);
  return "?";
}

BoundEnvelope::BoundEnvelope(const Precision& p, std::vector<Family> families, std::vector<double> elements,
                             bool step_local)
    : prec_(p),
      step_local_(step_local),
      families_(std::move(families)),
      elements_(std::move(elements)),
      envelope_(kNoiseWidth, 0.0) {}

void BoundEnvelope::seed(const std::vector<double>& noise) {
  for (size_t i = 0; i < kNoiseWidth && i < noise.size(); ++i)
    if (!std::isnan(noise[i])) envelope_[i] = std::max(envelope_[i], noise[i]);
}

const StepBounds& BoundEnvelope::step(const std::vector<double>& noise) {
  for (size_t i = 0; i < kNoiseWidth; ++i)
    envelope_[i] = std::max(envelope_[i], i < noise.size() ? noise[i] : std::numeric_limits<double>::quiet_NaN());
  auto B = [&](Quantity q, size_t i, double n = 0) {
    return measured_bound(prec_, q, envelope_[i], n, step_local_);
  };
  const size_t n = families_.size();
  b_.loss = B(Quantity::loss, kNoiseLoss);
  b_.grad_norm = B(Quantity::grad_norm, kNoiseGradNorm);
  b_.grad.assign(n, Bound{}), b_.param.assign(n, Bound{});
  b_.grad_far.assign(n, 1.0), b_.update_far.assign(n, 1.0);
  for (size_t g = 0; g < n; ++g) {
    const auto f = static_cast<size_t>(families_[g]);
    b_.grad[g] = B(Quantity::gradient, kNoiseGrad + f, elements_[g]);
    b_.param[g] = B(Quantity::parameter, kNoiseParam + f, elements_[g]);
    // |‖x‖ - ‖r‖| <= ‖x - r‖: the norm moves by at most its largest family's normwise error
    // (a norm carried by one element inherits that element's error); its parts are checked
    // family by family, so a wrong count still fails there
    if (b_.grad[g].value > b_.grad_norm.value) b_.grad_norm = b_.grad[g];
    b_.grad_far[g] = far_bound(envelope_[kNoiseFarGrad + f]);
    b_.update_far[g] = far_bound(envelope_[kNoiseFarParam + f]);
  }
  b_.expert_bias = B(Quantity::parameter, kNoiseBias);
  b_.route_tie = std::isnan(envelope_[kNoiseRoute]) ? 0.0 : kTwinFactor * envelope_[kNoiseRoute];
  return b_;
}

}  // namespace parity
