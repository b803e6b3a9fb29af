// The one-device baseline run of a scenario: data -> micro-batches -> gradients ->
// clipping -> optimizer -> expert-bias update, one step at a time, with everything a
// report or a dump needs recorded per step.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "harness/verdict/family_sums.h"
#include "mesh/mesh.h"
#include "mesh/run_config.h"
#include "model/data.h"
#include "model/model.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "ckpt/training_state.h"

namespace parity {

template <class T> struct StepRecord {
  int64_t step = 0;
  double loss = 0, ce = 0, aux = 0;
  std::vector<double> micro_losses;     // (M)
  double grad_norm = 0, clip_coef = 1;  // before clipping; the factor applied
  // fp16 (optim/loss_scaler.h): the loss scale this step ran with, and whether its gradients held
  // an inf or a NaN, so that it was skipped (its grads then recorded as zeros, grad_norm 0, no
  // optimizer step). Other policies: 1, false.
  double loss_scale = 1;
  bool skipped = false;
  // the largest |logit| stored in the step, and the root mean square over its tokens of the loss's gradient at the
  // logits (p - onehot, unscaled): a saturated softmax's floor (harness/verdict/tolerance.h saturation_floor)
  double logit_peak = 0, logit_grad_rms = 0;
  // fp8-delayed (core/fp8_delayed.h): the scales this step quantized with (empty otherwise); the
  // rounding twin quantizes with them, as it routes as the baseline did.
  std::vector<double> fp8_scales;
  std::vector<int64_t> inputs, targets;  // (B, S)
  std::optional<ParamSet<T>> grads;      // accumulated, unscaled, before clipping (when asked for)
  // under a policy that reduces in 16 bits: grads before the policy's rounding
  std::optional<ParamSet<T>> grads_exact;
  std::vector<std::vector<int64_t>> tokens_per_expert;  // per MoE layer: (E), whole step
  std::vector<std::vector<int64_t>> chosen;             // per MoE layer: (B*S, K)
  std::vector<std::vector<double>> select_scores;      // per MoE layer: (B*S, E) s + bias
  std::vector<double>
      noise;  // (kNoiseWidth) the rounding twin's distance (harness/runner/twin.h), when a source measured it
  // the baseline's sums over its whole model that the verdict reads (family_sums.h StepSums), when the
  // source formed them (the shared baseline's producer, once per host); null: a rank forms its own
  std::shared_ptr<const family_sums::StepSums> sums;
};

enum class KeepGrads { no, yes };

// The first quantity of baseline step `r` that is not finite, in data-flow order: the loss,
// a micro-batch loss, a gradient (when kept), the grad norm, then a parameter after the update
// (`params`, in `specs` order; may be empty): "loss = nan", "grad layers.0.attn.wq[5] = inf",
// "param embed.weight[0] = -inf". "" when everything is finite.
template <class T>
std::string first_non_finite(const StepRecord<T>& r, const std::vector<ParamSpec>& specs,
                             const std::vector<Tensor<T>>& params);
// Throws DivergedError (exit 4, core/exit_codes.h) naming the step and first_non_finite:
// "the one-device baseline went non-finite at step 1: loss = nan (...)".
template <class T>
void require_finite_baseline(const StepRecord<T>& r, const std::vector<ParamSpec>& specs,
                             const std::vector<Tensor<T>>& params);

template <class T> class BaselineRun {
 public:
  explicit BaselineRun(const Scenario& s);
  ~BaselineRun();
  BaselineRun(BaselineRun&&) = delete;  // the training state points into the run

  // Runs step `t` (0-based) and returns its record; parameters are updated in place.
  StepRecord<T> step(int64_t t, KeepGrads keep = KeepGrads::no);

  const Scenario& scenario() const { return sc_; }
  const MarkovData& data() const { return data_; }
  Model<T>& model() { return model_; }
  const Optimizer<T>& optimizer() const { return opt_; }
  const LossScaler& scaler() const { return scaler_; }  // fp16: the next step's scale

  // Checkpoints (ckpt/training_state.h names every piece) under the W = 1 mesh, every
  // tensor whole: save() writes the seed checkpoint any layout can start from (step
  // info.step); load() takes one saved under any layout and world size of the same model,
  // after which the next step() must be step(info.step).
  ckpt::ShardedState state();
  void save(const std::string& dir, const ckpt::CheckpointInfo& info);
  ckpt::CheckpointInfo load(const std::string& dir, const nlohmann::json& model, const nlohmann::json& run = nullptr);

 private:
  TrainingState<T>& training();
  Scenario sc_;
  MarkovData data_;
  Model<T> model_;
  Optimizer<T> opt_;
  LossScaler scaler_;  // fp16 only (scale 1 otherwise)
  mesh::Mesh mesh_;                       // world 1
  std::vector<mesh::TensorLayout> layouts_;     // per parameter under mesh_
  std::unique_ptr<TrainingState<T>> training_;  // built on first use
};

}  // namespace parity
