// The compute_copy row's rank side (harness/verdict/compute_copy.h): after a step, each compute
// copy this rank gathered (parallel/pmodel.h compute_copy: its model-parallel-local piece) against
// the same piece of the one-device copy, made here from the baseline's masters before the step by
// the baseline's rule (model/model.cpp run: the master rounded to the policy's storage format, a
// linear's weight then quantized to E4M3 with the scale of its whole tensor, or of each routed
// expert's). Under fp8-delayed the scale is not the tensor's own but its slot's of the step, from an
// amax history: the reference takes the scales the layout's step quantized with (before_step), so
// the row judges the rounding and the quantization of the gathered copy, not the history (a wrong
// history shows in the gradients, the zoo's fp8_delayed_* bugs; the host's shared baseline carries
// no scales). Nothing here touches the run: the reference is made in scratch buffers, under a copy
// of the fp8 state.
#pragma once
#include <cstdint>
#include <vector>

#include "core/fp8_delayed.h"
#include "core/tensor.h"
#include "harness/verdict/compute_copy.h"
#include "mesh/run_config.h"
#include "parallel/parallel_run.h"

namespace parity::verdict_copies {

template <class T> class CopyCheck {
 public:
  CopyCheck(const ParallelRun<T>& par, const Scenario& s);
  const std::vector<compute_copy::ParamInfo>& params() const { return params_; }

  // Before the layout's step: its fp8-delayed state, whose scales the step quantizes with (a no-op
  // under any other policy).
  void before_step(const ParallelRun<T>& par);
  // This rank's records after a step (one CopyLocal per parameter, registry order), appended to out.
  // before_base: the baseline's full masters before the step; before_local: this rank's shards before
  // it, whose elements are idx[p] of the full tensors (the premise: equal bit for bit).
  void append(const ParallelRun<T>& par, const std::vector<Tensor<T>>& before_base,
              const std::vector<Tensor<T>>& before_local, const std::vector<std::vector<int64_t>>& idx,
              std::vector<double>& out);

 private:
  ModelConfig model_;
  std::vector<compute_copy::ParamInfo> params_;
  std::vector<int64_t> fp8_blocks_;            // per parameter: model/params.h fp8_weight_blocks (0: none)
  std::vector<std::vector<int64_t>> box_;      // per parameter: its piece's global flat indices (made at first use)
  std::vector<char> boxed_;
  Fp8Delayed fp8_;  // fp8-delayed: the layout's state before the step (off otherwise)
};

// The global flat indices, row-major over `box`, of the box of a `global` tensor starting at `offset`.
std::vector<int64_t> box_indices(const Shape& global, const Shape& box, const std::vector<int64_t>& offset);

}  // namespace parity::verdict_copies
