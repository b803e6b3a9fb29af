// Pairwise coverage of a set of scenarios (docs/coverage.md). Every compared run of a
// scenario (its layout when world > 1, and a resume check's second layout) exercises some
// folding modes, read from the layout's degrees, and takes one value of each model/run
// option. A pair is (option value, mode): "shared=off x tp" holds when some run trains a
// model without shared expert under plain tensor parallelism. A bug that lives where two
// features meet (no shared expert under TP without SP; an aux loss over micro-batches) is
// only seen by a scenario that has both, so the shipped matrix must cover every pair. Every
// pair can occur: since etp is any degree that tiles the world and layout.order exists, no
// folding mode excludes an option value (docs/coverage.md, "What can co-occur").
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/run_config.h"

namespace parity::coverage {

// Folding modes (docs/design/foldings.md), each read from a layout's degrees:
//   fsdp dp_shard > 1, hsdp dp_replicate > 1, tp tp > 1 without sp, sp,
//   dp2ep / tp2ep / cross-lane: the EP folding when ep > 1 (mesh::folding), etp etp > 1,
//   pp pp > 1 (pipeline stages), cp cp > 1 (context parallel: every sequence split over ranks).
enum class Mode { fsdp, hsdp, tp, sp, dp2ep, tp2ep, cross_lane, etp, pp, cp };
inline constexpr int kModeCount = 10;
std::string_view mode_name(Mode m);  // "fsdp", ..., "cross-lane", "etp"
const std::vector<Mode>& all_modes();
// The modes a layout exercises, in Mode order; none for world 1.
std::vector<Mode> modes_of(const LayoutConfig& l);

// Model/run options. Most take one of several values; the four *_uneven options, order and
// resume are flags with a single value (when the flag is off the run takes no value: the
// even case and the megatron order are every layout's default and are covered everywhere).
enum class Option {
  shared,         // off: shared_experts 0; on: 1
  aux,            // off: aux_alpha 0; on: > 0
  bias,           // off: bias_rate 0; on: > 0 and top_k < experts (else the update is 0)
  microbatches,   // 1; >1
  tied,           // off; on: tie_embeddings
  score,          // softmax; sigmoid
  top_k,          // 1; all (top_k == experts > 1); other
  optim,          // sgd; adam; adamw
  clip,           // off: clip 0; on: clip > 0
  dtype,          // the precision policy: fp32; fp64; bf16 (bf16 storage, either reduction)
  vocab_uneven,   // yes: vocab % tp != 0 (the vocab-parallel embedding and head)
  mlp_uneven,     // yes: mlp_hidden % tp != 0 and a dense layer exists
  expert_uneven,  // yes: expert_hidden % etp != 0 and an MoE layer exists
  shared_uneven,  // yes: shared_hidden % tp != 0 and a shared expert exists
  order,          // deepspeed: layout.order deepspeed where its expert groups differ from megatron's
  resume,         // yes: the scenario is a save-and-resume check (both of its layouts)
  weight_decay,   // off: 0; on: > 0
  route_norm,     // off; on: the top-k weights renormalised
  route_scale,    // 1; other
  schedule,       // gpipe; 1f1b; interleaved: layout.pp_schedule where pp > 1
  dp_sharding,    // ddp; zero1; zero2: layout.dp_sharding where dp_shard > 1 and it is not fsdp
  norm,           // layernorm; rmsnorm: model.norm
  qk_norm,        // off; rmsnorm: model.qk_norm
  position,       // none; rope: model.position
  cp_order,       // contiguous; balanced: layout.cp_order where cp > 1
  kv_heads,       // heads; grouped: kv_heads < heads, whole KV heads per tp lane; replicated: kv_heads < tp
};
inline constexpr int kOptionCount = 26;

struct OptionInfo {
  Option option;
  std::string_view name;                 // "shared"
  std::vector<std::string_view> values;  // "off", "on"; a flag: "yes"
  bool moe = false;                      // takes no value in a model without an MoE layer
};
const std::vector<OptionInfo>& all_options();  // in Option order
const OptionInfo& option_info(Option o);

// The value (an index into option_info(o).values) that option o takes in a run of s under
// layout l, or -1 when it takes none (a flag that is off, an MoE option without MoE layer).
int option_value(Option o, const Scenario& s, const LayoutConfig& l);

struct Pair {
  Option option;
  int value;
  Mode mode;
  auto operator<=>(const Pair&) const = default;
};
std::string pair_name(const Pair& p);  // "shared=off x tp"

// Every (option value, mode) pair, in option, value, mode order.
std::vector<Pair> all_pairs();

// The layouts a scenario compares with the baseline: its layout when world > 1, and the
// resume check's layout (always world >= 2).
std::vector<LayoutConfig> compared_layouts(const Scenario& s);
// The pairs a scenario covers: over its compared layouts, each value its options take there
// with each mode of that layout. Sorted, unique. visit_covered_pairs: each offered to f as found, a pair that two
// layouts cover twice (what `parity cover`'s generator counts against its missing pairs, cover_gen.cpp).
std::vector<Pair> covered_pairs(const Scenario& s);
void visit_covered_pairs(const Scenario& s, const std::function<void(const Pair&)>& f);

// Option x option: two options' values taken by the same run ("shared=off x aux=on"). A bug
// that needs two settings together (an optimizer setting that only matters with a routing
// setting) is seen only by a run that has both.
struct OptionPair {
  Option a;
  int va;
  Option b;  // b > a
  int vb;
  auto operator<=>(const OptionPair&) const = default;
};
std::string option_pair_name(const OptionPair& p);  // "shared=off x aux=on"
// Whether the two values can be taken by one run (or act in it): bias=on means top_k <
// experts and an aux loss under top_k=all is a constant, so neither meets top_k=all;
// shared_hidden%tp=uneven needs a shared expert (docs/coverage.md, "What can co-occur").
bool possible(const OptionPair& p);
std::vector<OptionPair> all_option_pairs();  // the possible ones, in option, value order
// The option pairs a scenario covers: per compared layout, every two options' values there. Sorted, unique; or each
// offered to f as found.
std::vector<OptionPair> covered_option_pairs(const Scenario& s);
void visit_covered_option_pairs(const Scenario& s, const std::function<void(const OptionPair&)>& f);

struct CoverageReport {
  std::vector<Pair> pairs;               // all_pairs()
  std::vector<Pair> missing;             // pairs no scenario covers
  std::vector<std::vector<int>> cover;   // per pair: indices of the scenarios covering it
  std::vector<OptionPair> option_pairs;    // all_option_pairs()
  std::vector<OptionPair> option_missing;  // option pairs no scenario covers
  std::vector<int> option_cover;           // per option pair: how many scenarios cover it
};
CoverageReport check_coverage(const std::vector<Scenario>& scenarios);

// The report as text: a table (option value x mode: how many scenarios cover the pair, or
// "MISSING"), then one line per missing pair (both kinds), then a summary of each kind.
std::string format_coverage(const CoverageReport& r);

}  // namespace parity::coverage
