// sgd (momentum), adam and adamw exactly as MODEL.md (PyTorch's definitions), global-norm
// clipping, and the aux-loss-free expert-bias update. All arithmetic in the parameter
// dtype T, element by element, so a rank stepping its shard computes the same bits as the
// one-device run stepping the full tensor.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace parity {

// One element of one step, exactly as the step's CPU loop computes it: the parameter w and its
// moment(s) m (sgd: the momentum buffer) and v (adam, adamw; nullptr for sgd) updated in place from
// the (already clipped) gradient g. The verdict replays it on single elements (the update a
// gradient explains: harness/runner/verdict_taken.h), so it is the one host implementation.
template <class T> struct StepConstants {
  OptimKind kind = OptimKind::sgd;
  T lr{}, wd{}, mu{}, b1{}, b2{}, eps{}, bc1{}, bc2{};
  bool first = false;  // sgd: the buffer takes the gradient as it is on the first step
  void apply(T& w, T g, T& m, T* v) const {
    if (kind == OptimKind::sgd) {
      T d = g;
      if (wd != T(0)) d = d + wd * w;
      m = first ? d : mu * m + d;
      w = w - lr * m;
      return;
    }
    if (kind == OptimKind::adamw)
      w = w - lr * wd * w;
    else if (wd != T(0))
      g = g + wd * w;
    m = b1 * m + (T(1) - b1) * g;
    *v = b2 * *v + (T(1) - b2) * g * g;
    w = w - lr * (m / bc1) / (std::sqrt(*v / bc2) + eps);
  }
};
// The constants of step t (counted from 1) under cfg.
template <class T> StepConstants<T> step_constants(const OptimConfig& cfg, int64_t t);

template <class T> class Optimizer {
 public:
  Optimizer(const OptimConfig& cfg, const std::vector<ParamSpec>& specs);

  // One step of every parameter from its (already clipped) gradient.
  void step(ParamSet<T>& params, const ParamSet<T>& grads);
  // Sharded use: begin_step() once, then step_buffer() on each local slice with its own
  // state slices (buf_or_m, v); the result is the same as step() on the full tensors.
  void begin_step() { ++t_; }
  void step_buffer(T* w, const T* g, T* buf_or_m, T* v, int64_t n) const;

  int64_t steps_taken() const { return t_; }
  const ParamSet<T>& first_moment() const { return m_; }   // sgd: momentum buffer
  const ParamSet<T>& second_moment() const { return v_; }  // adam / adamw only
  bool has_second_moment() const { return cfg_.kind != OptimKind::sgd; }
  // For checkpoints (ckpt/training_state.h): the moments are filled in place (same
  // shapes as the parameters) and the step count restored before the next step.
  ParamSet<T>& first_moment() { return m_; }
  ParamSet<T>& second_moment() { return v_; }
  void set_steps(int64_t t) { t_ = t; }

 private:
  OptimConfig cfg_;
  int64_t t_ = 0;
  ParamSet<T> m_, v_;
};

// Sum of squares of every element of every tensor, accumulated in double in registry
// order then element order. Parallel layouts add per-shard partial sums of this.
template <class T> double sum_of_squares(const ParamSet<T>& grads);
template <class T> double sum_of_squares(const T* x, int64_t n);

// min(1, max_norm / (norm + 1e-6)); 1 when max_norm == 0 (clipping off).
double clip_coefficient(double norm, double max_norm);
// Multiplies every gradient by coef (skipped when coef == 1).
template <class T> void scale_grads(ParamSet<T>& grads, double coef);

// MODEL.md step 4: d_e = u * sign(mean(c) - c_e); d -= mean(d); bias += d.
// counts (E) = (token, slot) assignments to each expert over the whole step.
template <class T> void expert_bias_update(T* bias, const int64_t* counts, int64_t E, double rate);

}  // namespace parity
