#include "harness/runner/baseline.h"

#include "core/error.h"
#include "core/precision.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mesh/param_layout.h"
#include "ops/elementwise.h"
#include "model/batch_split.h"

namespace parity {

template <class T>
BaselineRun<T>::BaselineRun(const Scenario& s)
    : sc_(s),
      data_(s.model.vocab, s.data_seed),
      model_(s.model, s.seed),
      opt_(s.optim, model_.params.specs),
      scaler_(scales_loss(s.model.precision()) ? LossScaler(s.optim.loss_scale) : LossScaler()),
      mesh_(LayoutConfig{}) {
  for (const auto& sp : model_.params.specs) layouts_.push_back(mesh::param_layout(mesh_, sp));
}

template <class T> BaselineRun<T>::~BaselineRun() = default;

template <class T> TrainingState<T>& BaselineRun<T>::training() {
  if (!training_) {
    TrainingRefs<T> refs{&sc_.model, &model_.params.specs, &layouts_, {}, &opt_, &model_.expert_bias};
    if (scales_loss(sc_.model.precision())) refs.scaler = &scaler_;
    if (model_.fp8.on()) refs.fp8 = &model_.fp8;
    for (auto& t : model_.params.tensors) refs.params.push_back(&t);
    training_ = std::make_unique<TrainingState<T>>(std::move(refs));
  }
  return *training_;
}

template <class T> ckpt::ShardedState BaselineRun<T>::state() { return training().state(); }
template <class T> void BaselineRun<T>::save(const std::string& dir, const ckpt::CheckpointInfo& info) {
  training().save(nullptr, mesh_, info, dir);
}
template <class T> ckpt::CheckpointInfo BaselineRun<T>::load(const std::string& dir, const nlohmann::json& model,
                                                             const nlohmann::json& run) {
  return training().load(nullptr, mesh_, model, dir, run);
}

namespace {
void add_counts(std::vector<int64_t>& into, const std::vector<int64_t>& c) {
  if (into.empty()) into.assign(c.size(), 0);
  for (size_t e = 0; e < c.size(); ++e) into[e] += c[e];
}
}  // namespace

template <class T> StepRecord<T> BaselineRun<T>::step(int64_t t, KeepGrads keep) {
  const ModelConfig& c = sc_.model;
  const PrecisionScope policy(c.precision());  // the storage points of the model read it
  const LossScaleScope scaled(scaler_.scale);    // fp16: the backward's seeds read it
  const int64_t S = c.seq;
  StepRecord<T> rec;
  rec.step = t;
  rec.loss_scale = scaler_.scale;
  if (model_.fp8.on()) rec.fp8_scales.assign(model_.fp8.scales.data.begin(), model_.fp8.scales.data.end());
  rec.inputs.resize(static_cast<size_t>(c.batch * S));
  rec.targets.resize(static_cast<size_t>(c.batch * S));
  data_.batch(t, 0, c.batch, S, rec.inputs.data(), rec.targets.data());
  rec.tokens_per_expert.resize(static_cast<size_t>(c.moe_layers()));
  rec.chosen.resize(static_cast<size_t>(c.moe_layers()));
  rec.select_scores.resize(static_cast<size_t>(c.moe_layers()));

  model_.grads.zero();
  double logit_grad_sq = 0;
  for (int64_t mb = 0; mb < c.microbatches; ++mb) {
    const SeqRange seqs = micro_batch_sequences(c.batch, c.microbatches, mb);  // sizes may differ by one
    const int64_t off = seqs.begin * S;
    model_.route_first_token = off;  // the global id of its first token (near-tie arbitration)
    MicroResult r = model_.forward_backward(rec.inputs.data() + off, rec.targets.data() + off, seqs.size());
    rec.micro_losses.push_back(r.loss);
    rec.loss += r.loss;
    rec.ce += r.ce;
    rec.aux += r.aux;
    rec.logit_peak = std::max(rec.logit_peak, r.logit_peak);
    logit_grad_sq += r.logit_grad_sq;
    for (size_t l = 0; l < r.chosen.size(); ++l) {
      add_counts(rec.tokens_per_expert[l], r.tokens_per_expert[l]);
      rec.chosen[l].insert(rec.chosen[l].end(), r.chosen[l].begin(), r.chosen[l].end());
      rec.select_scores[l].insert(rec.select_scores[l].end(), r.select_scores[l].begin(), r.select_scores[l].end());
    }
  }
  rec.logit_grad_rms = std::sqrt(logit_grad_sq / static_cast<double>(c.batch * S));
  model_.fp8.end_step(nullptr);  // fp8-delayed: the amax histories pushed once per step (a no-op otherwise)
  // The policy's gradient reduction on one device: a sum of one term, rounded to its dtype. The sum
  // before its rounding is kept too: the grad rows compare a layout's exact reductions with it
  // (parallel/parallel_run.h RankStepRecord::grads_exact).
  if (c.reduce != Low::none && keep == KeepGrads::yes) rec.grads_exact = model_.grads;
  for (auto& g : model_.grads.tensors) round_to(c.reduce, g.ptr(), g.numel());
  if (scales_loss(c.precision())) {  // unscaled before the norm and the clipping; a skip records zeros
    rec.skipped = unscale_grads(model_.grads.tensors, scaler_.scale);
    if (rec.skipped) model_.grads.zero();
  }
  rec.grad_norm = std::sqrt(sum_of_squares(model_.grads));
  rec.clip_coef = clip_coefficient(rec.grad_norm, sc_.optim.clip);
  if (keep == KeepGrads::yes) rec.grads = model_.grads;
  scale_grads(model_.grads, rec.clip_coef);
  if (!rec.skipped) opt_.step(model_.params, model_.grads);
  if (scales_loss(c.precision())) scaler_.update(rec.skipped);
  if (c.bias_rate > 0)
    for (size_t l = 0; l < rec.tokens_per_expert.size(); ++l)
      expert_bias_update(model_.expert_bias[l].data(), rec.tokens_per_expert[l].data(), c.experts, c.bias_rate);
  return rec;
}

namespace {
// "NAME[i] = v" for the first non-finite element of `t`, or "".
template <class T> std::string non_finite_in(const char* what, const std::string& name, const Tensor<T>& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(static_cast<double>(t.ptr()[i])))
      return std::string(what) + " " + name + "[" + std::to_string(i) + "] = " +
             std::to_string(static_cast<double>(t.ptr()[i]));
  return "";
}
std::string scalar(const std::string& name, double x) {
  return std::isfinite(x) ? "" : name + " = " + std::to_string(x);
}
}  // namespace

template <class T>
std::string first_non_finite(const StepRecord<T>& r, const std::vector<ParamSpec>& specs,
                             const std::vector<Tensor<T>>& params) {
  if (std::string s = scalar("loss", r.loss); !s.empty()) return s;
  for (size_t m = 0; m < r.micro_losses.size(); ++m)
    if (std::string s = scalar("micro-batch " + std::to_string(m) + " loss", r.micro_losses[m]); !s.empty()) return s;
  if (r.grads)
    for (size_t p = 0; p < r.grads->tensors.size(); ++p)
      if (std::string s = non_finite_in("grad", r.grads->specs[p].name, r.grads->tensors[p]); !s.empty()) return s;
  if (std::string s = scalar("grad_norm", r.grad_norm); !s.empty()) return s;
  for (size_t p = 0; p < params.size() && p < specs.size(); ++p)
    if (std::string s = non_finite_in("param (after the update)", specs[p].name, params[p]); !s.empty()) return s;
  return "";
}

template <class T>
void require_finite_baseline(const StepRecord<T>& r, const std::vector<ParamSpec>& specs,
                             const std::vector<Tensor<T>>& params) {
  const std::string what = first_non_finite(r, specs, params);
  if (what.empty()) return;
  throw DivergedError("the one-device baseline went non-finite at step " + std::to_string(r.step) + ": " + what +
                      " (the training itself diverges under these inputs, e.g. the learning rate or route scale; "
                      "no layout can be judged against it: exit 4, not a parity failure)");
}

template class BaselineRun<float>;
template class BaselineRun<double>;
template std::string first_non_finite(const StepRecord<float>&, const std::vector<ParamSpec>&,
                                      const std::vector<Tensor<float>>&);
template std::string first_non_finite(const StepRecord<double>&, const std::vector<ParamSpec>&,
                                      const std::vector<Tensor<double>>&);
template void require_finite_baseline(const StepRecord<float>&, const std::vector<ParamSpec>&,
                                      const std::vector<Tensor<float>>&);
template void require_finite_baseline(const StepRecord<double>&, const std::vector<ParamSpec>&,
                                      const std::vector<Tensor<double>>&);

}  // namespace parity
