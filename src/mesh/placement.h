// Placements: where every element of a tensor lives on the mesh (docs/design/foldings.md).
//
// A tensor's TensorLayout (where its elements live) is a view and one placement per dimension of that view, applied
// left to right to the rank's local tensor, as in PyTorch's DTensor:
//   Replicate            every rank of the mesh dimension holds the whole local tensor
//   Shard(d)             split tensor dimension d into n pieces (torch.chunk: ceil(len / n)
//                        per piece, trailing pieces short or empty); rank i keeps piece i
//   StridedShard(d, sf)  split d into sf chunks, split each chunk into n pieces (both by the
//                        ceil rule); rank i keeps piece i of every chunk, concatenated
//   Partial(sum)         every rank holds a full-size addend; the value is their sum
//
// After a StridedShard the local dimension is a concatenation of sf segments, and a later
// Shard or StridedShard of the same tensor dimension splits along segment boundaries while
// the counts divide: with s segments, Shard keeps segments [i·s/n, (i+1)·s/n) and
// StridedShard (s = sf·n) keeps segments j·n + i for j < sf. This keeps the meaning "the
// dimensions to the right shard first" for any length: (StridedShard(0, tp), Shard(0)) on
// (dp_shard, tp) is FSDP applied to each TP shard, what FSDP2 stores. When sizes divide
// evenly it is exactly DTensor's left-to-right chunking of the local tensor.
//
// From the first placement whose segment count does not divide (nested StridedShard with
// any split factors, as DTensor view ops produce), that tensor dimension follows DTensor's
// rule (torch/distributed/tensor/_utils.py compute_local_shape_and_global_offset,
// _StridedShard._split_tensor): the local index list is chunked as a flat list, Shard
// keeping piece i of n, StridedShard(sf) splitting it into sf chunks (ceil rule), each into
// n pieces, and keeping piece i of every chunk. Every layout with sf >= 1 is accepted.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "mesh/mesh.h"

namespace parity::mesh {

enum class PlacementKind { replicate, shard, strided_shard, partial };

struct Placement {
  PlacementKind kind = PlacementKind::replicate;
  int64_t dim = -1;          // the tensor dimension (Shard, StridedShard)
  int64_t split_factor = 1;  // sf (StridedShard)

  static Placement replicate() { return {}; }
  static Placement shard(int64_t d) { return {PlacementKind::shard, d, 1}; }
  static Placement strided_shard(int64_t d, int64_t sf) { return {PlacementKind::strided_shard, d, sf}; }
  static Placement partial() { return {PlacementKind::partial, -1, 1}; }
  bool is_shard() const { return kind == PlacementKind::shard || kind == PlacementKind::strided_shard; }
  bool operator==(const Placement&) const = default;
};

std::string placement_str(const Placement& p);  // "Replicate", "Shard(0)", "StridedShard(0, 2)", "Partial(sum)"

struct TensorLayout {
  View view = View::dense;
  std::vector<Placement> placements;  // one per dimension of view_dims(view)
  // The pipeline stages holding the tensor, ascending (empty: every stage). A rank of another
  // stage holds none of it; the stages listed hold replicas of each other, the first counted.
  std::vector<int64_t> stages = {};
  bool operator==(const TensorLayout&) const = default;
};

// "(Replicate, StridedShard(0, 2), Shard(0))", + " on stage 1" / " on stages {0, 3}"
std::string layout_str(const TensorLayout& l);
// Whether `rank`'s pipeline stage holds the tensor.
bool holds(const Mesh& m, const TensorLayout& l, int rank);

// All Replicate in a view.
TensorLayout replicated(View v);

// Throws Error unless: one placement per view dimension, every sharded dimension exists in
// `shape`, and sf >= 1.
void check_layout(const Mesh& m, const TensorLayout& l, const Shape& shape);

// torch.chunk's rule: piece i of n over a length: [min(i·c, len), min((i+1)·c, len)), c = ceil(len / n).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};
Range chunk(int64_t len, int64_t n, int64_t i);

// For each tensor dimension, the global indices along it held by `rank`, in local order.
std::vector<std::vector<int64_t>> local_dim_indices(const Mesh& m, const TensorLayout& l, const Shape& shape, int rank);
// The same as maximal runs of consecutive global indices [begin, end), in local order (empty
// runs left out): one run for Shard, up to sf for StridedShard.
std::vector<std::vector<Range>> local_dim_ranges(const Mesh& m, const TensorLayout& l, const Shape& shape, int rank);
// DTensor's global offset (compute_local_shape_and_global_offset): per tensor dimension the
// first global index the rank holds; 0 on dimensions no placement shards; the dimension's
// length when the rank holds none of a sharded dimension (what DCP de-duplicates by).
Shape global_offset(const Mesh& m, const TensorLayout& l, const Shape& shape, int rank);
Shape local_shape(const Mesh& m, const TensorLayout& l, const Shape& shape, int rank);
// The flat (row-major) global index of every local element, in local row-major order.
std::vector<int64_t> global_indices(const Mesh& m, const TensorLayout& l, const Shape& shape, int rank);

// How many ranks hold each element: the product of the sizes of the Replicate and Partial
// dimensions (a Partial rank holds an addend of every element), times the stages holding it.
int64_t replication(const Mesh& m, const TensorLayout& l);

// True when `rank` holds the value itself under Partial: its coordinate is 0 on every
// Partial dimension (shard() gives the other ranks zeros).
bool partial_root(const Mesh& m, const TensorLayout& l, int rank);

// True when `rank` is the first of the ranks holding the same elements: coordinate 0 on
// every Replicate dimension, on the first stage holding it. Counting only first replicas counts each element once
// (grad norms, checkpoints, comparisons).
bool first_replica(const Mesh& m, const TensorLayout& l, int rank);

// Whether some rank's shard is shorter than another's along a sharded dimension (uneven),
// and whether some rank holds no element of a non-empty tensor (empty).
bool has_uneven_shards(const Mesh& m, const TensorLayout& l, const Shape& shape);
bool has_empty_shards(const Mesh& m, const TensorLayout& l, const Shape& shape);

}  // namespace parity::mesh
