// A run's training state as named checkpoint tensors (docs/ckpt.md, "Training state"): the
// same names, global shapes and layouts for the one-device baseline (W = 1) and every layout,
// so a checkpoint written by one loads into any other.
//
//   <param>                  every parameter of model/params.h (MODEL.md names), its layout
//   optim.m.<param>          adam / adamw first moment; sgd: the momentum buffer
//   optim.v.<param>          adam / adamw second moment
//   optim.step               int64 (): optimizer steps taken, replicated
//   expert_bias.layers.<l>   (experts) per MoE layer, replicated
// CheckpointInfo.step is the number of training steps done (the next step to run) and
// data_position the sequences consumed (step * model.batch): the data of step t is a pure
// function of t, so a resume needs nothing else.
//
// Layering: ckpt/ sits below parallel/ in ARCHITECTURE.md's list, but its interface
// (ckpt/checkpoint.h) uses only core, comm and mesh; this file is the one place the run
// classes reach into it.
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

namespace parity {

// What a TrainingState points at (not owned; everything must outlive it).
template <class T> struct TrainingRefs {
  const ModelConfig* model = nullptr;
  const std::vector<ParamSpec>* specs = nullptr;       // global shapes, registry order
  const std::vector<mesh::Layout>* layouts = nullptr;  // per parameter
  std::vector<Tensor<T>*> params;                      // this rank's shards under layouts
  Optimizer<T>* opt = nullptr;                         // over the local shapes
  std::vector<std::vector<T>>* expert_bias = nullptr;  // per MoE layer (E)
};

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
  // optimizer step is negative.
  ckpt::CheckpointInfo load(comm::Communicator* world, const mesh::Mesh& m, const nlohmann::json& model,
                            const std::string& dir);

 private:
  void restore(const std::string& dir);
  TrainingRefs<T> r_;
  Tensor<int64_t> step_{Shape{}};
  std::vector<Tensor<T>> bias_;
};

// "sequences consumed after `step` steps": step * batch.
inline int64_t data_position_after(const ModelConfig& c, int64_t step) { return step * c.batch; }

}  // namespace parity
