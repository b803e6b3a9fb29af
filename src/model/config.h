// The model and optimizer configuration (a scenario's "model" and "optim"; the layout is
// mesh/layout_config.h, the whole scenario mesh/run_config.h).
// Field names match docs/design/model.md and the scenario schema (docs/scenario.md).
#pragma once
#include <cstdint>
#include <array>
#include <string>

#include "core/precision.h"
#include "core/tensor.h"
#include "ops/norm.h"    // NormKind, the model's normalisation (an op)
#include "ops/router.h"  // Score, the router's scoring function (an op)

namespace parity {

enum class OptimKind { sgd, adam, adamw };
// Where a position enters attention: nowhere but the causal mask (none), or a rotary embedding
// of q and k by each token's global position (rope: ops/rope.h).
enum class Position { none, rope };

struct ModelConfig {
  int64_t vocab = 64, dim = 16, layers = 2, heads = 2;
  // Key / value heads (grouped-query attention): 0 means `heads` (multi-head), 1 multi-query,
  // a divisor of heads between: grouped-query. kv() reads it.
  int64_t kv_heads = 0;
  int64_t seq = 8, batch = 4, microbatches = 1;
  int64_t dense_layers = 1, mlp_hidden = 32;
  int64_t experts = 4, top_k = 2, expert_hidden = 16;
  int64_t shared_experts = 0, shared_hidden = 16;
  Score score = Score::softmax;
  bool route_norm = true;
  double route_scale = 1.0;
  double aux_alpha = 0.0;  // 0 = no sequence-wise balance loss
  double bias_rate = 0.0;  // 0 = no expert-bias update
  bool tie_embeddings = false;
  NormKind norm = NormKind::layernorm;  // every norm of the model: ln1, ln2, final_ln
  bool qk_norm = false;  // RMSNorm of each head of q and k before attention (Qwen3, OLMo 2)
  Position position = Position::none;
  double rope_theta = 10000.0;  // the rotary base (ops/rope.h's kRopeThetaDefault), read under rope only
  DType dtype = DType::f64;  // the compute dtype: accumulations, master weights, optimizer state
  Low store = Low::none;     // the precision policy's 16-bit storage (core/precision.h)
  Low reduce = Low::none;    // and the dtype of its gradient reductions
  bool fp8 = false;          // and its fp8 matmul inputs (core/fp8.h)
  bool fp8_delayed = false;  // with delayed scaling (core/fp8_delayed.h): the scenario's "fp8" object
  int64_t amax_history_len = 1024;  // steps each tensor's amax history holds (TransformerEngine's default)
  bool amax_most_recent = false;    // the scale from the last step's amax, not the history's max

  Precision precision() const { return {dtype, store, reduce, fp8, fp8_delayed}; }
  void set_precision(const Precision& p) {
    dtype = p.compute, store = p.store, reduce = p.reduce, fp8 = p.fp8, fp8_delayed = p.fp8_delayed;
  }

  int64_t head_dim() const { return dim / heads; }
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }  // the key / value heads
  int64_t kv_dim() const { return kv() * head_dim(); }             // wk's and wv's columns
  int64_t moe_layers() const { return layers - dense_layers; }
  bool is_moe(int64_t layer) const { return layer >= dense_layers; }
  // The largest micro-batch, ceil(batch / microbatches) sequences (model/batch_split.h: the
  // first batch % microbatches micro-batches hold one more than the others).
  int64_t micro_batch() const { return (batch + microbatches - 1) / microbatches; }
};

// fp16's dynamic loss scaling (optim/loss_scaler.h): a scenario's "optim.loss_scale", read under
// the fp16 policy only; the defaults are PyTorch's torch.amp.GradScaler's.
struct LossScaleConfig {
  double init_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;    // the scale times this after growth_interval steps without a skip
  double backoff_factor = 0.5;   // and times this at every skipped step
  int64_t growth_interval = 2000;
  bool operator==(const LossScaleConfig&) const = default;
};

struct OptimConfig {
  OptimKind kind = OptimKind::adam;
  double lr = 1e-3;
  double momentum = 0.0;  // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  double clip = 0.0;  // max global grad norm; 0 = no clipping
  LossScaleConfig loss_scale{};  // fp16 only
};

std::string_view score_name(Score s);
std::string_view norm_name(NormKind k);
std::string_view position_name(Position p);
std::string_view optim_name(OptimKind k);

}  // namespace parity
