#include "harness/runner/twin.h"

#include <algorithm>

#include <cmath>
#include <limits>

#include "core/precision.h"
#include "harness/verdict/tolerance.h"

namespace parity {

namespace {

// sqrt(sum (x - r)^2 / sum r^2) over a set of tensors (0 when both are 0).
// Also the far elements of harness/verdict/tolerance.h, for the rows' second measure.
// is_far's magnitude floor is the family's rms, as the verdict takes it (harness/runner/verdict_run.cpp).
struct Normwise {
  double diff2 = 0, ref2 = 0, far = 0, n = 0;
  template <class T> void add(const T* x, const T* r, size_t count, double rms) {
    for (size_t i = 0; i < count; ++i) {
      const double d = static_cast<double>(x[i]) - static_cast<double>(r[i]);
      diff2 += d * d, ref2 += static_cast<double>(r[i]) * static_cast<double>(r[i]);
      far += is_far(static_cast<double>(x[i]), static_cast<double>(r[i]), rms);
    }
    n += static_cast<double>(count);
  }
  double far_fraction() const { return n > 0 ? far / n : 0.0; }
  double rel() const {
    if (ref2 > 0) return std::sqrt(diff2 / ref2);
    return diff2 > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  }
};

double rel(double x, double r) { return std::abs(x - r) / (r != 0 ? std::abs(r) : 1.0); }

// One twin's step t and its noise against the baseline (bounds.h names each value).
template <class T>
std::vector<double> noise_of(BaselineRun<T>& run, uint64_t stream, double& model_sq_peak, int64_t t,
                             const StepRecord<T>& base,
                             const std::vector<Tensor<T>>& base_before, const std::vector<Tensor<T>>& base_params,
                             const std::vector<Buffer<T>>& base_bias) {
  const std::vector<Tensor<T>> before = run.model().params.tensors;
  StepRecord<T> r;
  {
    // The twin routes as the baseline did (model/route_oracle.h): a layout follows the
    // baseline's near-ties, so the noise measured here is rounding with routing held.
    const RouteOracle follow{&base.chosen, &base.select_scores, 0, 0, true};
    run.model().route_oracle = &follow;
    // fp8-delayed: and quantizes with the baseline's scales of the step (a layout's amaxes are the
    // baseline's but for reordered sums; the twin's own, from jittered values, would move every grid)
    if (!base.fp8_scales.empty())
      std::copy(base.fp8_scales.begin(), base.fp8_scales.end(), run.model().fp8.scales.data.begin());
    const JitterScope jitter(stream);
    r = run.step(t, KeepGrads::yes);
    run.model().route_oracle = nullptr;
  }
  std::vector<double> out(kNoiseWidth, 0.0);
  out[kNoiseLoss] = rel(r.loss, base.loss);
  out[kNoiseGradNorm] = rel(r.grad_norm, base.grad_norm);
  // under a policy that reduces in 16 bits, the gradients before that rounding, as the grad rows
  // compare them (parallel/parallel_run.h RankStepRecord::grads_exact)
  const bool exact = r.grads_exact && base.grads_exact;
  const auto& rg = exact ? r.grads_exact->tensors : r.grads->tensors;
  const auto& bg = exact ? base.grads_exact->tensors : base.grads->tensors;
  const auto& specs = r.grads->specs;
  std::vector<Normwise> g(kFamilyCount), p(kFamilyCount), u(kFamilyCount);
  const auto& params = run.model().params.tensors;
  std::vector<std::vector<double>> mine(specs.size()), ref(specs.size());  // the updates
  std::vector<double> gsq(kFamilyCount, 0), psq(kFamilyCount, 0), usq(kFamilyCount, 0), cnt(kFamilyCount, 0);
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto f = static_cast<size_t>(specs[i].family);
    for (size_t j = 0; j < params[i].data.size(); ++j) {
      mine[i].push_back(static_cast<double>(params[i].data[j]) - static_cast<double>(before[i].data[j]));
      ref[i].push_back(static_cast<double>(base_params[i].data[j]) - static_cast<double>(base_before[i].data[j]));
      const double gr = static_cast<double>(bg[i].data[j]),
                   pr = static_cast<double>(base_params[i].data[j]);
      gsq[f] += gr * gr, psq[f] += pr * pr, usq[f] += ref[i][j] * ref[i][j], cnt[f] += 1;
    }
  }
  auto rms = [&](const std::vector<double>& sq, size_t f) { return cnt[f] > 0 ? std::sqrt(sq[f] / cnt[f]) : 0.0; };
  double all_sq = 0, all_n = 0;  // a family far below the model's gradient scale (tolerance.h gradient_magnitude)
  for (size_t f = 0; f < kFamilyCount; ++f) all_sq += gsq[f], all_n += cnt[f];
  // a dead family's far elements against the model's largest scale so far, as the verdict measures them
  if (std::isfinite(all_sq)) model_sq_peak = std::max(model_sq_peak, all_sq);
  const double all_rms = all_n > 0 ? std::sqrt(std::max(model_sq_peak, all_sq) / all_n) : 0.0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto f = static_cast<size_t>(specs[i].family);
    g[f].add(rg[i].ptr(), bg[i].ptr(), rg[i].data.size(),
             gradient_magnitude(rms(gsq, f), all_rms));
    p[f].add(params[i].ptr(), base_params[i].ptr(), params[i].data.size(), rms(psq, f));
    u[f].add(mine[i].data(), ref[i].data(), mine[i].size(), rms(usq, f));
  }
  for (size_t f = 0; f < kFamilyCount; ++f) {
    out[kNoiseGrad + f] = g[f].rel(), out[kNoiseParam + f] = p[f].rel();
    out[kNoiseFarGrad + f] = g[f].far_fraction(), out[kNoiseFarParam + f] = u[f].far_fraction();
  }
  Normwise b;
  const auto& bias = run.model().expert_bias;
  for (size_t l = 0; l < bias.size() && l < base_bias.size(); ++l)
    b.add(bias[l].data(), base_bias[l].data(), bias[l].size(), 0.0);
  out[kNoiseBias] = b.rel();
  double route = 0;
  for (size_t l = 0; l < r.select_scores.size() && l < base.select_scores.size(); ++l)
    for (size_t i = 0; i < r.select_scores[l].size() && i < base.select_scores[l].size(); ++i)
      route = std::max(route, std::abs(r.select_scores[l][i] - base.select_scores[l][i]));
  out[kNoiseRoute] = route;
  return out;
}

}  // namespace

template <class T> void perturb(std::vector<Tensor<T>>& ts, uint64_t seed) {
  uint64_t k = 0x2545f4914f6cdd1dull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (auto& t : ts)
    for (T& x : t.data) {
      k ^= k >> 12, k ^= k << 25, k ^= k >> 27;
      const bool up = ((k * 0x9e3779b97f4a7c15ull) >> 63) != 0;
      x = std::nextafter(x, up ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity());
    }
}
template void perturb<float>(std::vector<Tensor<float>>&, uint64_t);
template void perturb<double>(std::vector<Tensor<double>>&, uint64_t);

Scenario twin_scenario(const Scenario& s) {
  Scenario t = s;
  t.model.microbatches = s.model.batch;  // one sequence each: the same loss, summed in another order
  return t;
}

template <class T> TwinRun<T>::TwinRun(const Scenario& s) {
  const int64_t n = std::max<int64_t>(s.twin_sets, 0) *
                    twin_count(s.model.precision(), static_cast<double>(s.model.batch * s.model.seq * s.model.dim));
  for (int64_t i = 0; i < n; ++i) {
    streams_.push_back(twin_stream() + static_cast<uint64_t>(i));
    runs_.push_back(std::make_unique<BaselineRun<T>>(twin_scenario(s)));
    model_sq_peak_.push_back(0);
    perturb(runs_.back()->model().params.tensors, streams_.back());
  }
}
template <class T> TwinRun<T>::~TwinRun() = default;

template <class T> void TwinRun<T>::skip(int64_t t) {  // routes freely: nothing to follow here
  for (size_t i = 0; i < runs_.size(); ++i) {
    const JitterScope jitter(streams_[i]);
    (void)runs_[i]->step(t);
  }
}

template <class T>
void TwinRun<T>::start_from(const std::vector<Tensor<T>>& params, const std::vector<Buffer<T>>& bias) {
  for (size_t k = 0; k < runs_.size(); ++k) {
    auto& mine = runs_[k]->model().params.tensors;
    for (size_t i = 0; i < mine.size() && i < params.size(); ++i) mine[i].data = params[i].data;
    perturb(mine, streams_[k]);
    auto& b = runs_[k]->model().expert_bias;
    for (size_t l = 0; l < b.size() && l < bias.size(); ++l) b[l] = bias[l];
  }
}

template <class T> std::vector<double> TwinRun<T>::step(int64_t t, const StepRecord<T>& base,
                                                        const std::vector<Tensor<T>>& base_before,
                                                        const std::vector<Tensor<T>>& base_params,
                                                        const std::vector<Buffer<T>>& base_bias) {
  std::vector<double> out;
  if (runs_.empty()) return std::vector<double>(kNoiseWidth, std::numeric_limits<double>::quiet_NaN());
  for (size_t k = 0; k < runs_.size(); ++k) {
    const std::vector<double> one =
        noise_of(*runs_[k], streams_[k], model_sq_peak_[k], t, base, base_before, base_params, base_bias);
    if (out.empty()) {
      out = one;
      continue;
    }
    for (size_t i = 0; i < out.size() && i < one.size(); ++i) out[i] = std::fmax(out[i], one[i]);  // NaN: unmeasured
  }
  return out;
}

template class TwinRun<float>;
template class TwinRun<double>;

}  // namespace parity
