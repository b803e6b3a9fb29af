#include "optim/optimizer.h"

#include <cmath>

#include "core/device.h"
#include "ops/elementwise.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

namespace parity {

template <class T>
Optimizer<T>::Optimizer(const OptimConfig& cfg, const std::vector<ParamSpec>& specs)
    : cfg_(cfg), m_(ParamSet<T>::zeros(specs)) {
  if (cfg.kind != OptimKind::sgd) v_ = ParamSet<T>::zeros(specs);
}

template <class T> void Optimizer<T>::step(ParamSet<T>& params, const ParamSet<T>& grads) {
  begin_step();
  for (size_t i = 0; i < params.size(); ++i) {
    T* v = cfg_.kind == OptimKind::sgd ? nullptr : v_.tensors[i].ptr();
    step_buffer(params.tensors[i].ptr(), grads.tensors[i].ptr(), m_.tensors[i].ptr(), v, params.tensors[i].numel());
  }
}

template <class T> StepConstants<T> step_constants(const OptimConfig& cfg, int64_t t) {
  StepConstants<T> c;
  c.kind = cfg.kind;
  c.lr = static_cast<T>(cfg.lr), c.wd = static_cast<T>(cfg.weight_decay), c.mu = static_cast<T>(cfg.momentum);
  c.b1 = static_cast<T>(cfg.beta1), c.b2 = static_cast<T>(cfg.beta2), c.eps = static_cast<T>(cfg.eps);
  c.bc1 = T(1) - static_cast<T>(std::pow(cfg.beta1, static_cast<double>(t)));
  c.bc2 = T(1) - static_cast<T>(std::pow(cfg.beta2, static_cast<double>(t)));
  c.first = t == 1;
  return c;
}

template <class T> void Optimizer<T>::step_buffer(T* w, const T* g, T* m, T* v, int64_t n) const {
  const StepConstants<T> c = step_constants<T>(cfg_, t_);
#if PARITY_HAVE_CUDA
  if (on_cuda()) {
    if (c.kind == OptimKind::sgd) return cuda::sgd_step(w, g, m, n, c.lr, c.wd, c.mu, c.first);
    return cuda::adam_step(w, g, m, v, n, c.lr, c.wd, c.b1, c.b2, c.eps, c.bc1, c.bc2, c.kind == OptimKind::adamw);
  }
#endif
  for (int64_t i = 0; i < n; ++i) c.apply(w[i], g[i], m[i], v ? v + i : nullptr);
}

template <class T> double sum_of_squares(const T* x, int64_t n) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::sum_of_squares(x, n);
#endif
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

template <class T> double sum_of_squares(const ParamSet<T>& grads) {
  double s = 0;
  for (const auto& t : grads.tensors) s += sum_of_squares(t.ptr(), t.numel());
  return s;
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  double c = max_norm / (norm + 1e-6);
  return c < 1.0 ? c : 1.0;
}

template <class T> void scale_grads(ParamSet<T>& grads, double coef) {
  if (coef == 1.0) return;
  const T c = static_cast<T>(coef);
  for (auto& t : grads.tensors) scale_values(t.ptr(), c, t.numel());
}

template <class T> void expert_bias_update(T* bias, const int64_t* counts, int64_t E, double rate) {
  if (rate == 0 || E == 0) return;
  double total = 0;
  for (int64_t e = 0; e < E; ++e) total += static_cast<double>(counts[e]);
  const double mean_c = total / static_cast<double>(E);
  std::vector<double> d(static_cast<size_t>(E));
  double mean_d = 0;
  for (int64_t e = 0; e < E; ++e) {
    const double diff = mean_c - static_cast<double>(counts[e]);
    d[static_cast<size_t>(e)] = rate * static_cast<double>((diff > 0) - (diff < 0));
    mean_d += d[static_cast<size_t>(e)];
  }
  mean_d /= static_cast<double>(E);
  for (int64_t e = 0; e < E; ++e) bias[e] += static_cast<T>(d[static_cast<size_t>(e)] - mean_d);
}

#define PARITY_INSTANTIATE(T)                                                \
  template class Optimizer<T>;                                               \
  template StepConstants<T> step_constants<T>(const OptimConfig&, int64_t);  \
  template double sum_of_squares<T>(const ParamSet<T>&);                     \
  template double sum_of_squares<T>(const T*, int64_t);                      \
  template void scale_grads<T>(ParamSet<T>&, double);                        \
  template void expert_bias_update<T>(T*, const int64_t*, int64_t, double);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
