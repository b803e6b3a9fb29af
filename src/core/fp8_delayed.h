// The fp8 policy's delayed scaling (precision "fp8-delayed", docs/precision.md "fp8, delayed
// scaling"): TransformerEngine's DelayedScaling recipe at the points of core/fp8.h. Every quantized
// tensor (a linear's input, its weight, its output gradient; a routed expert's each) has one scale
// per step, per tensor, and an amax history:
//   - step t quantizes with the scale of its slot computed from the amaxes of steps < t: the max of
//     the last amax_history_len steps' amaxes ("max") or the last one ("most_recent"); scale =
//     max / amax in fp32; an amax at rounding level (kFp8AmaxRounding) or not finite keeps the
//     previous scale;
//     a tensor with no amax yet (fresh) is recorded but not quantized (TransformerEngine quantizes it
//     with scale 1);
//   - while the step runs each rank records the amax of every piece it quantizes (every micro-batch,
//     every pipeline chunk, a recomputed forward again: a max, so the same);
//   - once per optimizer step (end_step), the recorded amaxes are completed over the ranks that hold
//     the tensor's pieces (the data-parallel replicas' tokens, the context and sequence chunks, the
//     TP / ETP lanes' columns, the experts' owners: the layout reduces over its world, a rank that
//     holds no piece contributing 0), pushed onto the history, and the next step's scales computed.
// With its scale fixed before the step starts, a quantization is elementwise: the one-device run
// and every layout compute the same values wherever the amax reduction is complete.
//
// Slots: each module of linears ("layers.L.attn": wq, wk, wv, wo; "layers.L.mlp", "layers.L.moe.
// shared", "layers.L.moe.experts" with one block per routed expert: w1, w3, w2) has kFp8SiteSlots
// slots per block: its E4M3 inputs in the order the forward quantizes them (0 ..), its E5M2 output
// gradients in the order the backward does (kFp8GradSlot0 ..), its weights in registry order
// (kFp8WeightSlot0 ..). The model layer builds the modules (model/params.h fp8_modules).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/fp8.h"
#include "core/tensor.h"

namespace parity {

inline constexpr int64_t kFp8SiteSlots = 12, kFp8GradSlot0 = 4, kFp8WeightSlot0 = 8;
// An amax at most 2^-24 (fp32's unit roundoff) times the largest of its format at the step (E4M3's
// over the inputs and weights, E5M2's over the gradients; each slot's amax_h) is rounding, and counts
// as none (the slot keeps its scale, or stays fresh): a tensor that is zero but for rounding (an
// attention's dq, dk at step 0 of a drawn model: 6e-12 and 4.4e-10 in the baseline, exactly 0 in a
// TP layout, beside gradients of 0.1 to 0.5) would otherwise set a scale of 57344 / 4.4e-10 in the
// baseline alone, which saturates the next step's real gradient (1e-4) there and not in the layout
// (ci/calibrate seeds 48125 and 48201; docs/precision.md). An absolute 2^-32 missed the second.
inline constexpr float kFp8AmaxRounding = 0x1p-24f;

struct Fp8Module {
  std::string prefix;                // "layers.0.attn"
  int64_t blocks = 1;                // routed experts: one per expert
  std::vector<std::string> weights;  // full parameter names, registry order (at most 4)
};

class Fp8Delayed {
 public:
  Fp8Delayed() = default;  // off: the current-scaling recipe (or no fp8)
  Fp8Delayed(const std::vector<Fp8Module>& modules, int64_t history_len, bool most_recent);

  bool on() const { return slots_ > 0; }
  int64_t slots() const { return slots_; }
  int64_t history_len() const { return history_len_; }
  // The first slot of `prefix`'s block; throws Error for a module the model has not.
  int64_t site(std::string_view prefix, int64_t block) const;
  // The slot of weight `name`'s block; throws Error for a parameter that is not an fp8 weight.
  int64_t weight_slot(std::string_view name, int64_t block) const;
  static Fp8 format(int64_t slot) { return slot % kFp8SiteSlots / 4 == 1 ? Fp8::e5m2 : Fp8::e4m3; }

  float scale(int64_t slot) const { return static_cast<float>(scales.data[static_cast<size_t>(slot)]); }
  // Whether slot has no amax yet: its scale is the start's 1 (no step has pushed an amax above
  // rounding level; an amax of exactly 448 or 57344, which sets 1 too, then also leaves it unquantized
  // for a step, in the baseline and every layout alike). Such a tensor is recorded but not quantized
  // (its first step, or a routed expert's first step with tokens): the recipe's scale 1 would put most of a weight of
  // std 0.02 and most gradients below E4M3's / E5M2's normal range (docs/precision.md).
  bool fresh(int64_t slot) const;
  void record(int64_t slot, float amax);
  bool recorded() const { return recorded_; }  // an amax recorded since the last end_step
  // The step's end: this rank's recorded amaxes completed by `reduce` (null: this rank's alone),
  // pushed onto every slot's history, the next step's scales computed, the record cleared.
  void end_step(const AmaxReduce* reduce);

  // The checkpoint's state (ckpt/training_state.h "fp8."): the history (H, S), row 0 the last
  // step's amaxes, and the scales (S) the next step uses, fp32 values held in doubles.
  Tensor<double> history{Shape{0}}, scales{Shape{0}};
  // Throws ConfigError(where, ...) unless the two hold this state's shapes, positive finite
  // scales and non-negative amaxes (a loaded checkpoint's).
  void check(const std::string& where) const;

 private:
  int64_t slots_ = 0, history_len_ = 0;
  bool most_recent_ = false, recorded_ = false;
  std::map<std::string, std::pair<int64_t, int64_t>, std::less<>> sites_;  // prefix: first slot, blocks
  std::map<std::string, std::pair<std::string, int64_t>, std::less<>> weights_;  // name: prefix, index
  std::vector<float> amax_;  // this step's record (S)
};

// The delayed state of the run on this thread (thread-local, like PrecisionScope): the baseline's
// model and each rank's parallel model set theirs around their forwards and backwards.
class Fp8StateScope {
 public:
  explicit Fp8StateScope(Fp8Delayed* s);
  ~Fp8StateScope();
  Fp8StateScope(const Fp8StateScope&) = delete;
  Fp8StateScope& operator=(const Fp8StateScope&) = delete;

 private:
  Fp8Delayed* saved_;
};
Fp8Delayed* fp8_delayed();  // null, or the state of this thread (on() may be false)

// The module whose quantizations follow on this thread (module "attn", "mlp", "moe.shared",
// "moe.experts" of layer `layer`), its counters of E4M3 / E5M2 quantizations reset; the second form
// takes block `block` (a routed expert, global index) of the enclosing site. Nothing without a
// delayed state on the thread.
class Fp8SiteScope {
 public:
  Fp8SiteScope(int64_t layer, std::string_view module);
  explicit Fp8SiteScope(int64_t block);
  ~Fp8SiteScope();
  Fp8SiteScope(const Fp8SiteScope&) = delete;
  Fp8SiteScope& operator=(const Fp8SiteScope&) = delete;

  struct Site {
    std::string prefix;
    int64_t base = -1, e4 = 0, e5 = 0;
  };

 private:
  Site site_;
  Site* saved_ = nullptr;
  bool set_ = false;
};
// The slot of the next quantization of format f at this thread's site; throws std::logic_error
// outside a site or past its slots (a quantization point the sites do not cover).
int64_t fp8_next_slot(Fp8 f);

}  // namespace parity
