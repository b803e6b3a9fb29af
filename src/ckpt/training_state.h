// A run's training state as named checkpoint tensors (docs/ckpt.md, "Training state"): the
// same names, global shapes and layouts for the one-device baseline (W = 1) and every layout,
// so a checkpoint written by one loads into any other.
//
//   <param>                  every parameter of model/params.h (MODEL.md names), its layout
//   optim.m.<param>          adam / adamw first moment; sgd: the momentum buffer
//   optim.v.<param>          adam / adamw second moment
//   optim.step               int64 (): optimizer steps taken, replicated
//   expert_bias.layers.<l>   (experts) per MoE layer, replicated
//   scaler.scale             f64 (): fp16's loss scale for the next step, replicated (fp16 only)
//   scaler.growth_tracker    int64 (): its steps without a skip since its last change, replicated
//   fp8.amax_history         f64 (H, S): fp8-delayed's amax history of every fp8 tensor (core/fp8_delayed.h),
//                            row 0 the last step's, replicated (fp8-delayed only)
//   fp8.scale                f64 (S): the scales the next step quantizes with (fp32 values), replicated
// CheckpointInfo.step is the number of training steps done (the next step to run) and
// data_position the sequences consumed (step * model.batch): the data of step t is a pure
// function of t, so a resume needs nothing else.
//
// Layering (ARCHITECTURE.md: each layer uses only the ones above it): the runs hand their
// pieces down as TrainingRefs (parallel/training_refs.h); ParallelRunState wraps a
// ParallelRun for the harness.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "comm/communicator.h"
#include "mesh/mesh.h"
#include "mesh/placement.h"
#include "model/config.h"
#include "model/params.h"
#include "optim/optimizer.h"
#include "parallel/parallel_run.h"
#include "parallel/training_refs.h"

namespace parity {

template <class T> class TrainingState {
 public:
  explicit TrainingState(TrainingRefs<T> refs) : r_(std::move(refs)) {}
  TrainingState(const TrainingState&) = delete;
  TrainingState& operator=(const TrainingState&) = delete;

  // Every piece of the state, pointing at the run's tensors; the optimizer step and the
  // expert bias are copied into mirrors owned here (valid until the next call).
  ckpt::ShardedState state();

  // Collective over `world` (nullptr: W = 1, written by this process alone with
  // ckpt::save_all). info.step / data_position / model as ckpt::save takes them.
  void save(comm::Communicator* world, const mesh::Mesh& m, const ckpt::CheckpointInfo& info,
            const std::string& dir);
  // Collective (nullptr: W = 1). Fills every piece from `dir` (saved under any layout and
  // world size), restores the optimizer step and the bias. Throws as ckpt::load does, and
  // ConfigError when info.data_position is not info.step * model.batch or the saved
  // optimizer step is negative. `run` (CheckpointInfo::run, null: not checked) must agree
  // with the saved run's identity (ckpt::check_run), checked before any tensor is read.
  ckpt::CheckpointInfo load(comm::Communicator* world, const mesh::Mesh& m, const nlohmann::json& model,
                            const std::string& dir, const nlohmann::json& run = nullptr);

 private:
  void restore(const std::string& dir);
  void restore_fp8(const std::string& where);
  TrainingRefs<T> r_;
  Tensor<int64_t> step_{Shape{}};
  std::vector<Tensor<T>> bias_;
  Tensor<double> scale_{Shape{}};       // fp16: the loss scaler's
  Tensor<int64_t> tracker_{Shape{}};
  bool restore_scaler_ = true;          // the bug zoo's fp16_scale_not_restored: false off the first rank
  Tensor<double> fp8_history_{Shape{0}}, fp8_scale_{Shape{0}};  // fp8-delayed: the state's mirrors
};

// A ParallelRun's whole training state (this rank's shards under run.layouts()) as a
// checkpoint, saved and loaded collectively over `world` (the run's). load() takes a
// checkpoint saved under any layout and world size of the same model and continues from
// its step: the run's next step() must be step(info.step).
template <class T> class ParallelRunState {
 public:
  ParallelRunState(ParallelRun<T>& run, comm::Communicator& world)
      : run_(run), world_(world), state_(run.training_refs()) {}
  ckpt::ShardedState state() { return state_.state(); }
  void save(const std::string& dir, const ckpt::CheckpointInfo& info) { state_.save(&world_, run_.mesh(), info, dir); }
  ckpt::CheckpointInfo load(const std::string& dir, const nlohmann::json& model, const nlohmann::json& run = nullptr) {
    return state_.load(&world_, run_.mesh(), model, dir, run);
  }

 private:
  ParallelRun<T>& run_;
  comm::Communicator& world_;
  TrainingState<T> state_;
};

// "sequences consumed after `step` steps": step * batch.
inline int64_t data_position_after(const ModelConfig& c, int64_t step) { return step * c.batch; }

}  // namespace parity
