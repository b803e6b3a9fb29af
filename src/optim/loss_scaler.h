// fp16's dynamic loss scaling (docs/precision.md "fp16"), PyTorch's torch.amp.GradScaler: the
// loss's gradient is multiplied by the scale before the backward (core/precision.h
// LossScaleScope), so that small gradients survive fp16's storage points; the gradients are
// multiplied by 1 / scale (unscaled) before the norm, the clipping and the optimizer; a step whose
// gradients hold an inf or a NaN anywhere in the world is skipped (no optimizer step), the scale
// then times backoff_factor; after growth_interval steps in a row without a skip, times
// growth_factor. The one-device run is the definition: a layout's ranks all-reduce the found-inf
// flag over the whole world (parallel/parallel_run.cpp), so every rank skips the steps it skips.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "ops/elementwise.h"

namespace parity {

struct LossScaler {
  LossScaleConfig cfg;
  double scale = 1;            // the scale of the next step (fp32, as GradScaler's tensor)
  int64_t growth_tracker = 0;  // steps in a row without a skip since the last change

  LossScaler() = default;
  explicit LossScaler(const LossScaleConfig& c) : cfg(c), scale(static_cast<float>(c.init_scale)) {}
  // After a step: found_inf (the world's) backs the scale off, or counts towards its growth
  // (PyTorch's _amp_update_scale_: a growth that would overflow fp32 is not taken).
  void update(bool found_inf) {
    if (found_inf) {
      scale = static_cast<float>(scale * cfg.backoff_factor);
      growth_tracker = 0;
      return;
    }
    if (++growth_tracker < cfg.growth_interval) return;
    const auto grown = static_cast<float>(scale * cfg.growth_factor);
    if (std::isfinite(grown)) scale = grown;
    growth_tracker = 0;
  }
};

// Whether any of n values is an inf or a NaN.
template <class T> bool any_non_finite(const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return true;
  return false;
}

// GradScaler's unscale_: every gradient times 1 / scale (computed in T, as its fp32 inv_scale);
// returns whether any of them is an inf or a NaN (this rank's found-inf flag).
// On cuda one kernel per tensor (the host's pass moved every gradient's pages to the host and back).
template <class T> bool unscale_grads(std::vector<Tensor<T>>& grads, double scale) {
  const auto inv = static_cast<T>(1.0 / scale);
  bool found = false;
  for (auto& g : grads) found = scale_find_non_finite(g.ptr(), inv, g.numel()) || found;
  return found;
}

}  // namespace parity
