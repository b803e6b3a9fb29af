// The model, optimizer, layout and run configuration: everything a scenario file fixes.
// Field names match shared/design/MODEL.md and the scenario schema (docs/scenario.md).
#pragma once
#include <cstdint>
#include <array>
#include <optional>
#include <string>

#include "core/precision.h"
#include "core/tensor.h"
#include "ops/router.h"  // Score, the router's scoring function (an op)

namespace parity {

enum class OptimKind { sgd, adam, adamw };

struct ModelConfig {
  int64_t vocab = 64, dim = 16, layers = 2, heads = 2;
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
  DType dtype = DType::f64;  // the compute dtype: accumulations, master weights, optimizer state
  Low store = Low::none;     // the precision policy's 16-bit storage (core/precision.h)
  Low reduce = Low::none;    // and the dtype of its gradient reductions

  Precision precision() const { return {dtype, store, reduce}; }
  void set_precision(const Precision& p) { dtype = p.compute, store = p.store, reduce = p.reduce; }

  int64_t head_dim() const { return dim / heads; }
  int64_t moe_layers() const { return layers - dense_layers; }
  bool is_moe(int64_t layer) const { return layer >= dense_layers; }
  // The largest micro-batch, ceil(batch / microbatches) sequences (model/batch_split.h: the
  // first batch % microbatches micro-batches hold one more than the others).
  int64_t micro_batch() const { return (batch + microbatches - 1) / microbatches; }
};

struct OptimConfig {
  OptimKind kind = OptimKind::adam;
  double lr = 1e-3;
  double momentum = 0.0;  // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  double clip = 0.0;  // max global grad norm; 0 = no clipping
};

// How world ranks are numbered in the expert view (docs/mesh.md, "Rank order"):
//   megatron   Megatron's tp-ep-dp, the expert coordinates row-major over the world rank
//   deepspeed  DeepSpeed's TP-strided expert groups: inside each dp_replicate block the
//              expert coordinates are row-major over tp_rank * dp_shard + dp_shard_rank
// The dense view is numbered the same way under both.
enum class RankOrder { megatron, deepspeed };

// FSDP's shard dimension for one parameter family (layout.fsdp_dim, docs/scenario.md): a
// tensor dimension (negative counts from the last, as in PyTorch), or `largest`: the
// dimension with the most indices in the model-parallel-local tensor (the first on a tie).
struct FsdpDimRule {
  enum class Kind { dim, largest };
  Kind kind = Kind::dim;
  int64_t dim = 0;
  bool operator==(const FsdpDimRule&) const = default;
};
// One rule per model/params.h Family, indexed by the enum's value; dim 0 everywhere by
// default (FSDP2's default Shard(0)).
using FsdpDimConfig = std::array<FsdpDimRule, 8>;

// World size and parallel degrees (shared/design/FOLDINGS.md). Filled in by later issues;
// the one-device baseline is world 1 with every degree 1.
struct LayoutConfig {
  int64_t world = 1;
  int64_t dp_replicate = 1, dp_shard = 1, tp = 1;
  int64_t ep = 1, etp = 1;
  int64_t cp = 1;  // context parallel: each sequence split into cp chunks (docs/parallel.md)
  bool sp = false;
  RankOrder order = RankOrder::megatron;
  FsdpDimConfig fsdp_dim{};
  std::string backend = "gloo";
  std::string device = "cpu";  // "cpu" | "cuda": where the baseline and every rank compute
};

// A save-and-resume-elsewhere check (docs/scenario.md, "resume"): the run trains save_at
// steps under the scenario's layout and saves, then this layout loads the checkpoint and
// trains the remaining steps; both phases are compared with the uninterrupted baseline.
struct ResumeConfig {
  int64_t save_at = 0;
  LayoutConfig layout;
};

struct Scenario {
  std::string name;      // file stem unless given
  std::string source;    // path it was read from ("" when built in code)
  ModelConfig model;
  OptimConfig optim;
  LayoutConfig layout;
  int64_t steps = 10;
  uint64_t seed = 1234;       // parameter initialisation
  uint64_t data_seed = 5678;  // the Markov chain and the sequences drawn from it
  std::optional<ResumeConfig> resume;
};

std::string_view score_name(Score s);
std::string_view order_name(RankOrder o);  // "megatron", "deepspeed"
std::string_view optim_name(OptimKind k);

}  // namespace parity
