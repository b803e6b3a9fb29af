// A synthetic training state with the model's real tensor names, shapes and layouts, whose
// values are a formula of (tensor name, global index, salt): for round-trip checks, the
// checkpoint tests and `parity ckpt bench`. Every rank builds its own shards; after a load
// under any layout, wrong() counts the elements that are not bitwise the formula.
//
// Tensors: every parameter of model/params.h under mesh::param_layout, Adam's moments
// "optim.m.<param>" and "optim.v.<param>" under the same layout, "expert_bias.layers.<l>"
// (experts,) per MoE layer and the int64 "optim.step" () replicated.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

#include "ckpt/checkpoint.h"
#include "model/config.h"

namespace parity::ckpt {

class SyntheticState {
 public:
  SyntheticState(const ModelConfig& c, const mesh::Mesh& m, int rank, uint64_t salt);
  SyntheticState(const SyntheticState&) = delete;
  SyntheticState& operator=(const SyntheticState&) = delete;

  ShardedState& state() { return state_; }
  const ShardedState& state() const { return state_; }
  // Every local tensor filled with a value the formula never gives (and the wrong shape),
  // so that a load that misses an element cannot pass.
  void scramble();
  // Elements of this rank's shards that differ bitwise from the formula (or a wrong shape: all).
  int64_t wrong() const;
  int64_t bytes() const;  // of this rank's local tensors

  static double value(const std::string& name, int64_t global_index, uint64_t salt);

 private:
  const mesh::Mesh& mesh_;
  int rank_;
  uint64_t salt_;
  std::deque<Tensor<double>> f64_;
  std::deque<Tensor<int64_t>> i64_;
  ShardedState state_;
};

}  // namespace parity::ckpt
