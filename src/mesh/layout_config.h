// The layout's one home: the degrees a run folds its ranks into, the rank order, FSDP's shard
// dimension per family, the backend and the device (docs/design/foldings.md, docs/mesh.md);
// how a layout is read from and written to JSON (scenario files and checkpoint records share
// the codec); how it is described in words (every report uses describe_layout); and the
// rules a layout must meet (checked once per scenario, errors naming the JSON path).
// Adding a degree: a field here, its row in the degree table (layout_config.cpp), its rule, its words.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/backend.h"
#include "core/device.h"
#include "model/config.h"
#include "model/params.h"

namespace parity {

// How world ranks are numbered in the expert view (docs/mesh.md, "Rank order"):
//   megatron   Megatron's tp-ep-dp, the expert coordinates row-major over the world rank
//   deepspeed  DeepSpeed's TP-strided expert groups: inside each dp_replicate block the
//              expert coordinates are row-major over tp_rank * dp_shard + dp_shard_rank
// The dense view is numbered the same way under both.
enum class RankOrder { megatron, deepspeed };
std::string_view order_name(RankOrder o);  // "megatron", "deepspeed"

// Activation recompute (layout.recompute, docs/parallel.md "Activation recompute"): which part
// of every transformer layer keeps only its input in the forward and re-runs its forward,
// collectives included, right before its backward. The one-device baseline never recomputes.
//   none       every activation the backward needs is kept (the default)
//   full       the whole layer: only the layer's input is kept (Megatron's full, uniform, 1 layer)
//   attention  the attention block (ln1, q/k/v, attention, wo): its input is kept
//   mlp        the FFN block (ln2 and the dense MLP or the MoE: router, dispatch, experts,
//              shared expert): its input is kept, and the routing for the recompute's check
enum class Recompute { none, full, attention, mlp };
std::string_view recompute_name(Recompute r);  // "none", "full", "attention", "mlp"

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
static_assert(std::tuple_size_v<FsdpDimConfig> == kFamilyCount, "layout.fsdp_dim holds one rule per family");

// How the data-parallel shard group (dp_shard; edp_shard for routed experts) holds a family
// (layout.dp_sharding, layout.expert_dp_sharding; docs/parallel.md "Data-parallel sharding"):
//   fsdp   parameters, gradients and optimizer state sharded (ZeRO-3-like, the default)
//   ddp    everything replicated, gradients all-reduced
//   zero1  parameters and gradients replicated (all-reduced), optimizer state sharded, the
//          updated parameter shards all-gathered
//   zero2  as zero1 but gradients reduce-scattered (each rank keeps its shard's gradient)
// dp_replicate (and cp) stay replicas under every mode, as in HSDP.
enum class DpSharding { fsdp, ddp, zero1, zero2 };
std::string_view dp_sharding_name(DpSharding s);  // "fsdp", "ddp", "zero1", "zero2"

// Pipeline parallel's schedule (layout.pp_schedule, docs/parallel.md "Pipeline parallel"): the
// order in which each stage runs the forward (F) and backward (B) of every micro-batch.
//   gpipe        every F, then every B (GPipe; torch.distributed.pipelining's ScheduleGPipe)
//   1f1b         pp - stage - 1 warm-up Fs, then one F and one B in turn, then the last Bs
//                (PipeDream-flush, Megatron's non-interleaved schedule)
//   interleaved  1F1B over pp_virtual model chunks per stage (Megatron's interleaved schedule;
//                micro-batches a multiple of pp)
enum class PpSchedule { gpipe, one_f_one_b, interleaved };
std::string_view pp_schedule_name(PpSchedule s);  // "gpipe", "1f1b", "interleaved"

// Context parallel's chunk order (layout.cp_order, docs/parallel.md "Context parallel"):
//   contiguous  rank r holds positions [r·S/cp, (r+1)·S/cp) of every sequence (the default)
//   balanced    Megatron's load-balanced order: the sequence cut into 2·cp chunks of S/(2·cp),
//               rank r holding chunks r and 2·cp-1-r (each rank's causal attention work equal)
enum class CpOrder { contiguous, balanced };
std::string_view cp_order_name(CpOrder o);  // "contiguous", "balanced"

// World size and parallel degrees; the one-device baseline is world 1 with every degree 1.
struct LayoutConfig {
  int64_t world = 1;
  // Pipeline parallel: the layers split into pp stages (pp_virtual model chunks each under the
  // interleaved schedule), pp the outermost coordinate of the world rank in both rank orders
  // (Megatron's tp-cp-dp-pp; DeepSpeed's pipe-data-model topology also puts pipe outermost).
  // pp_layers: the layers of each virtual stage in order (stage v % pp holds virtual stage v);
  // empty: as even as possible, the earlier virtual stages taking the extra layers.
  int64_t pp = 1, pp_virtual = 1;
  PpSchedule pp_schedule = PpSchedule::one_f_one_b;
  std::vector<int64_t> pp_layers = {};
  int64_t dp_replicate = 1, dp_shard = 1, tp = 1;
  int64_t ep = 1, etp = 1;
  int64_t cp = 1;  // context parallel: each sequence split into cp chunks (docs/parallel.md)
  CpOrder cp_order = CpOrder::contiguous;
  bool sp = false;
  Recompute recompute = Recompute::none;  // a training option of the layout: it moves no element
  RankOrder order = RankOrder::megatron;
  FsdpDimConfig fsdp_dim{};
  DpSharding dp_sharding = DpSharding::fsdp;         // the dense families
  DpSharding expert_dp_sharding = DpSharding::fsdp;  // routed experts (defaults to dp_sharding in files)
  comm::Backend backend = comm::Backend::gloo;
  Device device = Device::cpu;  // where the baseline and every rank compute
};

// ---- the degree table ---------------------------------------------------------------------
// One row per degree of LayoutConfig, in the records' order (world, dp_replicate, dp_shard, tp,
// ep, etp, cp, pp, pp_virtual). Every list of degrees reads it: the codec (both records' keys),
// check_structure's ">= 1" and world's product, the full, report and brief words' dense part,
// the checkpoint check (ckpt/verify.cpp, through mesh_differences), coverage's memo key, the
// factors a verdict names a wrong scale by (harness/verdict/verdict_root.h) and the degrees
// `parity compare` reads from a producer's record. A new degree is a field above and a row here
// (and, for a factor of world, a place in world_factors).
struct Degree {
  std::string_view key;           // the JSON key in both records, and the degree's name in messages
  int64_t LayoutConfig::*field;
  bool omitted_when_one = false;  // written only where it is not 1 (keys newer than the first files)
  std::string_view brief;         // its word in the brief form ("dps"); "" for a degree that is no factor of world
  // The verdict's word for a wrong scale of this size ("2 (= tp)"), and a producer record's key
  // (`parity compare`); "" for none. dp_replicate and dp_shard name one factor, dp, their product.
  std::string_view factor;
  int factor_order = -1;  // the factors' order in the verdict's words: a tie reads "2 (= ep) or 2 (= dp)"
};
const std::vector<Degree>& layout_degrees();
// The micro-batches, a factor the verdict names too (the model's, not the layout's): its place
// among the factor_order of the rows.
inline constexpr int kMicrobatchesFactorOrder = 6;
// The distinct factor words of the table, in factor_order ("tp", "ep", "etp", "dp", "cp",
// "world", "pp"), and one's value in a layout: the product of its rows' degrees.
const std::vector<std::string_view>& factor_words();
int64_t factor_value(const LayoutConfig& l, std::string_view word);
// The degrees whose product is world, in the order the words and the rule write them (pp,
// dp_replicate, dp_shard, cp, tp: outermost first): rows of layout_degrees().
const std::vector<Degree>& world_factors();

// ---- JSON ---------------------------------------------------------------------------------
// Which record: a scenario's "layout" (every field; a missing key is its default) or a
// checkpoint's "mesh" (the degrees and the order, which decide where every element lives;
// world to etp required). Defaults are left out where files predate their field (cp 1,
// order megatron, device cpu, fsdp_dim 0), so older files are rewritten byte for byte.
enum class LayoutRecord { scenario, checkpoint };

// Reads the record at JSON path `path` ("$.layout", "$.resume.layout", "$.mesh"); throws
// ConfigError naming "<path>.<key>" for an unknown key, a wrong type, a missing required key
// or an unknown name. Values are not checked here: validate_layout does that.
LayoutConfig read_layout(const nlohmann::json& j, const std::string& path, LayoutRecord record);
// The record's keys in a fixed order: world, dp_replicate, dp_shard, tp, ep, etp, [cp],
// [order], then for a scenario sp, [recompute], backend, [device], [fsdp_dim]. recompute is a
// scenario key only (it decides no element's place, so a checkpoint's mesh has none).
nlohmann::ordered_json layout_json(const LayoutConfig& l, LayoutRecord record);

// Where two layouts' checkpoint records differ: one entry per key of the record (every degree
// of the table, pp_layers, order), in the record's order, each value in words ("2", "megatron",
// "[3,1]"; pp_layers "even" when it is empty). A key left out of a record at its default
// counts as that default. Empty: the two place every element alike.
struct FieldDifference {
  std::string key, a, b;
};
std::vector<FieldDifference> mesh_differences(const LayoutConfig& a, const LayoutConfig& b);

// ---- words --------------------------------------------------------------------------------
enum class LayoutText {
  full,    // "world 8 = dp_replicate 1 x dp_shard 4 x tp 2, ep 4, etp 1" (+ ", sp", ", deepspeed
           //  order", ", recompute full"): golden files' layout_shape, run's phase lines
  report,  // "world 8 = dp_replicate 1 x dp_shard 4 x tp 2 (ep 4, etp 1)" (+ ", recompute full"):
           //  --report's "layout"
  brief,   // "dps 4 x tp 2, ep 4" (+ ", recompute full"): the matrix table, summary.md ("one
           //  device" for world 1)
  stem,    // "fsdp4_tp2_ep4" (+ "_recompute_full"): the file names `parity cover` writes
};
// Recompute's words appear only when it is not none, so every existing text stays as it was.
std::string describe_layout(const LayoutConfig& l, LayoutText form);

// ---- rules --------------------------------------------------------------------------------
// The structural rules, in this order: every degree >= 1 (world, dp_replicate, dp_shard, tp,
// ep, etp, cp, pp, pp_virtual), world <= kMaxWorld, world = pp·dp_replicate·dp_shard·cp·tp,
// dp_replicate·ep·etp divides world / pp. Throws ConfigError("<prefix><field>", rule): a
// scenario reports its main layout under "$.layout." and its resume layout under "$.resume.layout.".
inline constexpr int64_t kMaxWorld = int64_t{1} << 20;
void check_structure(const LayoutConfig& layout, const std::string& prefix = "$.layout.");

// Every rule a layout must meet for this model, the one implementation of each (a
// scenario's layouts and every rank through validate, `parity explain`, the ckpt commands all
// call it), in this order (docs/scenario.md): check_structure's, experts % ep, heads % tp,
// sequence parallel needs tp > 1 and seq % tp, validate_cp's, fsdp_dim names a dimension of
// every tensor of its family (check_fsdp_dim in mesh/param_layout.h), recompute needs a layout
// (world > 1: the baseline alone never recomputes, so the option would check nothing).
void validate_layout(const LayoutConfig& layout, const ModelConfig& model, const std::string& prefix = "$.layout.");
// A layout that met every rule for its model: validate is the only way to make one (torchtitan's
// ParallelDims validates at construction), so a step that takes one checks nothing again.
class ValidLayout {
 public:
  const LayoutConfig& config() const { return layout_; }

 private:
  explicit ValidLayout(const LayoutConfig& l) : layout_(l) {}
  friend ValidLayout validate(const LayoutConfig&, const ModelConfig&, const std::string&);
  LayoutConfig layout_;
};
// validate_layout's rules, then the runner's: a batch of at least one sequence per micro-batch
// (model/batch_split.h; any batch splits over the data-parallel ranks, a rank may take none).
// The one check a scenario's layouts (validate_scenario) and every rank (ParallelRun, for a
// scenario built in code) make. Throws ConfigError("<prefix><field>" or "$.model.<field>", rule).
ValidLayout validate(const LayoutConfig& layout, const ModelConfig& model, const std::string& prefix = "$.layout.");
// validate_layout's pipeline rules: pp_virtual > 1 only (and always) under interleaved, whose
// micro-batches pp divides; pp_layers, when given, one count >= 0 per virtual stage summing to
// model.layers.
void validate_pp(const LayoutConfig& layout, const ModelConfig& model, const std::string& prefix = "$.layout.");
// The layers [begin, end) of each virtual stage v (v in [0, pp * pp_virtual)), on stage v % pp.
std::vector<std::pair<int64_t, int64_t>> pp_stage_layers(const LayoutConfig& layout, int64_t layers);
// validate_layout's context-parallel rules: cp divides model.seq; with sp, cp*tp does; the
// balanced order needs cp > 1 and 2*cp dividing model.seq.
void validate_cp(const LayoutConfig& layout, const ModelConfig& model, const std::string& prefix = "$.layout.");

}  // namespace parity
