// TrainingState (training_state.h).
#include "ckpt/training_state.h"

#include "core/inject.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ckpt/checkpoint.h"

namespace parity {

template <class T> ckpt::ShardedState TrainingState<T>::state() {
  const ModelConfig& c = *r_.model;
  const auto& specs = *r_.specs;
  const auto& layouts = *r_.layouts;
  if (r_.params.size() != specs.size() || layouts.size() != specs.size())
    throw Error("training state: " + std::to_string(specs.size()) + " parameters, " +
                std::to_string(r_.params.size()) + " tensors, " + std::to_string(layouts.size()) + " layouts");
  ckpt::ShardedState st;
  for (size_t p = 0; p < specs.size(); ++p) st.add(specs[p].name, specs[p].shape, layouts[p], *r_.params[p]);
  const auto& opt_layouts = r_.opt_layouts ? *r_.opt_layouts : layouts;  // ZeRO-1/2: sharded
  ParamSet<T>& m = r_.opt->first_moment();
  for (size_t p = 0; p < specs.size(); ++p)
    st.add("optim.m." + specs[p].name, specs[p].shape, opt_layouts.at(p), m.tensors.at(p));
  if (r_.opt->has_second_moment()) {
    // bug zoo (core/inject.h) ckpt_v_from_m_buffer: the second moment's entries point at the
    // first moment's tensors, on save and on load alike
    static const bool one_buffer = injected("ckpt_v_from_m_buffer");
    ParamSet<T>& v = one_buffer ? m : r_.opt->second_moment();
    for (size_t p = 0; p < specs.size(); ++p)
      st.add("optim.v." + specs[p].name, specs[p].shape, opt_layouts.at(p), v.tensors.at(p));
  }
  step_ = Tensor<int64_t>(Shape{}, std::vector<int64_t>{r_.opt->steps_taken()});
  st.add("optim.step", {}, mesh::replicated(mesh::View::dense), step_);
  const auto& bias = *r_.expert_bias;
  bias_.clear();
  for (const auto& b : bias) bias_.emplace_back(Shape{c.experts}, b);
  for (size_t l = 0; l < bias_.size(); ++l)
    st.add("expert_bias.layers." + std::to_string(c.dense_layers + static_cast<int64_t>(l)), {c.experts},
           mesh::replicated(mesh::View::dense), bias_[l]);
  if (r_.scaler != nullptr) {  // fp16: the loss scaler's state, replicated (every rank's is the world's)
    scale_ = Tensor<double>(Shape{}, std::vector<double>{r_.scaler->scale});
    tracker_ = Tensor<int64_t>(Shape{}, std::vector<int64_t>{r_.scaler->growth_tracker});
    st.add("scaler.scale", {}, mesh::replicated(mesh::View::dense), scale_);
    st.add("scaler.growth_tracker", {}, mesh::replicated(mesh::View::dense), tracker_);
  }
  if (r_.fp8 != nullptr) {  // fp8-delayed: the histories and scales, replicated (every rank's is the world's)
    fp8_history_ = r_.fp8->history, fp8_scale_ = r_.fp8->scales;
    st.add("fp8.amax_history", fp8_history_.shape, mesh::replicated(mesh::View::dense), fp8_history_);
    st.add("fp8.scale", fp8_scale_.shape, mesh::replicated(mesh::View::dense), fp8_scale_);
  }
  return st;
}

template <class T>
void TrainingState<T>::save(comm::Communicator* world, const mesh::Mesh& m, const ckpt::CheckpointInfo& info,
                            const std::string& dir) {
  const ckpt::ShardedState st = state();
  if (world == nullptr)
    ckpt::save_all(m, {&st}, info, dir);
  else
    ckpt::save(*world, m, st, info, dir);
}

template <class T>
ckpt::CheckpointInfo TrainingState<T>::load(comm::Communicator* world, const mesh::Mesh& m, const nlohmann::json& model,
                                            const std::string& dir, const nlohmann::json& run) {
  ckpt::ShardedState st = state();
  ckpt::CheckpointInfo info;
  if (world == nullptr) {
    const ckpt::Checkpoint ck = ckpt::Checkpoint::open(dir);
    ckpt::load_rank(ck, m, st, 0, model, run);
    info = {ck.md().step, ck.md().data_position, ck.md().model, ck.md().run};
  } else {
    info = ckpt::load(*world, m, st, model, dir, run);
  }
  const std::string where = dir + "/metadata.json";
  if (info.step < 0 || info.data_position != data_position_after(*r_.model, info.step))
    throw ConfigError(where, "step " + std::to_string(info.step) + " and data_position " +
                                 std::to_string(info.data_position) + " disagree: a run consumes model.batch (" +
                                 std::to_string(r_.model->batch) + ") sequences per step");
  restore_scaler_ = world == nullptr || world->rank() == 0;
  restore(dir);
  return info;
}

template <class T> void TrainingState<T>::restore(const std::string& dir) {
  const std::string where = dir + "/metadata.json";
  if (step_.numel() != 1 || step_.data[0] < 0)
    throw ConfigError(where, "tensor 'optim.step': must hold one non-negative count");
  // bug zoo (core/inject.h): the optimizer's step count not restored on resume
  if (!injected("adam_step_not_restored")) r_.opt->set_steps(step_.data[0]);
  auto& bias = *r_.expert_bias;
  if (bias_.size() != bias.size()) throw Error("training state: expert bias layers changed during a load");
  for (size_t l = 0; l < bias.size(); ++l) bias[l] = bias_[l].data;
  restore_fp8(where);
  if (r_.scaler == nullptr) return;
  if (scale_.numel() != 1 || !(scale_.data[0] > 0) || !std::isfinite(scale_.data[0]))
    throw ConfigError(where, "tensor 'scaler.scale': must hold one positive finite loss scale");
  if (tracker_.numel() != 1 || tracker_.data[0] < 0)
    throw ConfigError(where, "tensor 'scaler.growth_tracker': must hold one non-negative count");
  // bug zoo (core/inject.h): the loss scaler's state restored on the first rank of the world only
  static const bool rank0_only = injected("fp16_scale_not_restored");
  if (rank0_only && !restore_scaler_) return;
  r_.scaler->scale = scale_.data[0], r_.scaler->growth_tracker = tracker_.data[0];
}

template <class T> void TrainingState<T>::restore_fp8(const std::string& where) {
  if (r_.fp8 == nullptr) return;
  Fp8Delayed loaded = *r_.fp8;
  loaded.history = fp8_history_, loaded.scales = fp8_scale_;
  loaded.check(where);
  // bug zoo (core/inject.h): the amax histories and scales not restored (every rank resumes at scale 1)
  static const bool fresh = injected("fp8_history_not_restored");
  if (!fresh) r_.fp8->history = fp8_history_, r_.fp8->scales = fp8_scale_;
}

template class TrainingState<float>;
template class TrainingState<double>;

}  // namespace parity
