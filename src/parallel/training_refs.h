// What a run's training state is made of, as pointers into the run (the one-device baseline
// or a ParallelRun): ckpt/training_state.h turns it into named checkpoint tensors. Here, not
// in ckpt/, because ARCHITECTURE.md's layers use only the ones above them: parallel/ hands
// its pieces down, ckpt/ reads and writes them.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "mesh/placement.h"
#include "model/config.h"
#include "model/params.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace parity {

// Not owned; everything must outlive whatever holds the refs.
template <class T> struct TrainingRefs {
  const ModelConfig* model = nullptr;
  const std::vector<ParamSpec>* specs = nullptr;       // global shapes, registry order
  const std::vector<mesh::TensorLayout>* layouts = nullptr;  // per parameter
  std::vector<Tensor<T>*> params;                      // this rank's shards under layouts
  Optimizer<T>* opt = nullptr;                         // over the local shapes
  std::vector<Buffer<T>>* expert_bias = nullptr;  // per MoE layer (E)
  // the optimizer state's layouts where they are not `layouts` (ZeRO-1/2: sharded while the
  // parameters are replicated); nullptr: `layouts`
  const std::vector<mesh::TensorLayout>* opt_layouts = nullptr;
  LossScaler* scaler = nullptr;  // fp16's loss scaler (its scale and growth tracker), else nullptr
  Fp8Delayed* fp8 = nullptr;     // fp8-delayed's amax histories and scales (core/fp8_delayed.h), else nullptr
};

}  // namespace parity
