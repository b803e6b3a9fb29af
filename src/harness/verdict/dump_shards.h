// Sharded tensors as a framework holds them (issue 46 item 5): a collected dump may hold a
// tensor as every rank's shard, "NAME@R" for global rank R, with a placement in its manifest,
// so a TP- or FSDP-sharded run is compared without a gather in the user's code:
//   "mesh": {"dims": ["dp", "tp"], "shape": [2, 2], "ranks": [[0, 0], [0, 1], [1, 0], [1, 1]]}
//   "placements": {"grads.layers.0.mlp.w1": {"stored": [F, D], "transposed": true,
//                                           "placements": ["Replicate", "column"]}, ...
//                  "params.embed.weight": {"stored": [V, D], "transposed": false,
//                                          "flat": [[offset, numel], ...one per rank]}}
// KEY is "grads.NAME" or "params.NAME" (the latter also for the initial parameters' NAME).
// "stored": the tensor's full shape as the shards hold it (torch's (out, in) for an nn.Linear:
// "transposed" then says parity's layout is its transpose). One placement per mesh dim, as
// DTensor's: "Shard(d)" (the dim split as torch.chunk splits it, nested in mesh-dim order),
// "Replicate" (every coordinate holds the same copy, bit for bit), "Partial" (the tensor is the
// sum over that dim); Megatron's "column" (output features split: Shard(0) of a transposed
// (out, in) weight, Shard(1) of an (in, out) one) and "row" (input features split). Or "flat":
// FSDP1's flat parameter, each rank a piece [offset, offset + numel) of the tensor flattened in
// its stored layout, every element held by exactly one rank; with "replicate": ["rep"] (HSDP:
// flat pieces replicated over another mesh dim) by exactly one rank at coordinate 0 of those
// dims, every other rank a copy of the piece at its coordinates with those set to 0.
// Bad records (a shape the placement does not give, a rank without its shard) are bad input:
// ConfigError (exit 2) naming the rank and the placement. What a shard holds is judged:
// dump_compare.cpp's "shards" row names a Replicate copy that differs (and whether the copies'
// sum is the reference's: a Partial tensor recorded as reduced, or a gradient not summed), a
// shard holding another slice of the reference than its placement says (a wrong offset), flat
// pieces that overlap or leave a gap; the gradient rows name their worst shard.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "harness/verdict/dump_read.h"

namespace parity {

// One rank's shard of a tensor, read and placed.
struct Shard {
  int64_t rank = 0;
  std::string where;           // "rank 1 (dp 0, tp 1; tp column: dim 0 16..31)"
  std::vector<int64_t> index;  // flat indices into the stored full tensor, in the shard's order
  std::vector<double> values;
  int64_t copy_of = -1;  // a Replicate copy: the shard (index into the list) it must equal bit for bit
  std::string replicate_over;  // the mesh dims it is a copy over ("dp")
  std::vector<std::pair<int64_t, int64_t>> box;  // per stored dim [lo, hi); empty for a flat piece
  int64_t flat_offset = -1;                      // a flat piece's offset
  std::vector<int64_t> coords;                   // on the mesh
};

struct ShardedTensor {
  Shape stored;  // the full tensor's shape as the shards hold it
  bool transposed = false;
  std::vector<Shard> shards;  // one per rank
  std::vector<std::string> replicate;  // per mesh dim: its name where the placement is Replicate, else ""
  std::vector<std::string> partial;    // per mesh dim: its name where the placement is Partial, else ""
};

class ShardPlan {
 public:
  // The candidate's mesh and placements (none: nothing is sharded).
  static ShardPlan read(const Dump& d);
  bool any() const { return !placements_.empty(); }
  bool sharded(const std::string& key) const { return placements_.contains(key); }
  // Every rank's shard of KEY, stored in `f` as NAME@R (`name`: NAME without the rank), whose
  // parity shape is `shape`; ConfigError naming `where`, the rank and the placement for a shard
  // that is missing or has a shape its placement does not give.
  ShardedTensor load(const Dump& d, const SafetensorsFile& f, const std::string& where, const std::string& key,
                     const std::string& name, const Shape& shape) const;

 private:
  nlohmann::json placements_ = nlohmann::json::object();
  std::vector<std::string> dims_;
  std::vector<int64_t> sizes_;
  std::vector<std::vector<int64_t>> coords_;  // per rank
  std::string rank_words(int64_t r) const;
  // A flat placement's "replicate": per mesh dim, its name where the pieces are copies over it.
  std::vector<std::string> flat_replicas(const Dump& d, const nlohmann::json& spec, const std::string& at) const;
};

// The full tensor in parity's layout: representatives' values placed (Partial ones summed);
// `gaps` gets the flat pieces that overlap or leave elements unheld.
std::vector<double> assemble(const ShardedTensor& t, std::vector<std::string>& gaps);
// The same in the stored layout, and parity's layout <-> stored layout.
std::vector<double> assemble_stored(const ShardedTensor& t, std::vector<std::string>& gaps);
std::vector<double> to_stored(const ShardedTensor& t, const std::vector<double>& parity_layout);

// Replicate copies that differ in their bits: "rank 3 (...) differs from rank 1 (...)"; `summed`
// gets the Replicate dims along which the copies differ and their sum is the reference's within
// `bound` (normwise, against `ref_stored`, the reference in the stored layout): each copy a part.
// A tensor with Partial dims is summed over them too (a copy of a part is a part), and a copy
// that differs is cross-checked on its Partial sum: "...; its sum over tp (ranks 2, 3) is not
// the reference's (normwise 0.41) while rank 0's line's is" (or "...is the reference's: the
// parts are split otherwise, their sum agrees").
std::vector<std::string> copies_differ(const ShardedTensor& t, const std::vector<double>& ref_stored, double bound,
                                       std::string& summed);
// A shard that is not the reference's slice where its placement puts it, but is bit for bit the
// slice at another offset: "rank 1 (...) holds dim 0 15..30 of the reference: a wrong shard
// offset"; "" otherwise.
std::string misplaced(const Shard& s, const Shape& stored, const std::vector<double>& ref_stored);
// The representative shard furthest from the reference: "rank 1 (...): normwise 0.5, scale 0.5";
// "" when every shard is within `bound`.
std::string worst_shard(const ShardedTensor& t, const std::vector<double>& ref_stored,
                        const std::vector<double>& got_stored, double bound);

}  // namespace parity
