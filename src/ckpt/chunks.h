// The geometry of a checkpoint: which rectangles of a global tensor a rank writes, and how
// the bytes of a saved rectangle land in a rank's local tensor under another layout.
//
// A rank's local tensor under a TensorLayout is the cartesian product of one list of global
// indices per tensor dimension (mesh::local_dim_indices). Each list splits into maximal runs
// of consecutive indices (one run for Shard, sf runs for StridedShard), and the product of
// the runs gives the rectangles the rank really holds; each rectangle is written row-major
// as one contiguous chunk. A 0-d tensor is one rectangle of one element.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "mesh/mesh.h"
#include "mesh/placement.h"

namespace parity::ckpt {

// Per tensor dimension, [begin, end) in global coordinates.
struct Rect {
  std::vector<mesh::Range> dims;
  Shape shape() const;
  int64_t numel() const;
  bool operator==(const Rect&) const = default;
};
std::string rect_str(const Rect& r);  // "[0:4, 0:16]": per dimension begin:end

// A rectangle of a rank's local tensor: its global extent and where it starts locally.
struct LocalChunk {
  Rect rect;
  std::vector<int64_t> local_begin;  // per dimension, the local index of rect's first element
};

// True when `rank` writes its shard of a tensor under `l`: its coordinate is 0 on every
// Replicate dimension (the first replica), so every element is written exactly once.
// Throws Error for a Partial placement: a checkpoint holds values, not addends.
bool writes_shard(const mesh::Mesh& m, const mesh::TensorLayout& l, const std::string& tensor, int rank);

// The rectangles of rank's shard (empty ones left out), in local row-major order.
std::vector<LocalChunk> shard_chunks(const mesh::Mesh& m, const mesh::TensorLayout& l, const Shape& shape, int rank);

// Copies the chunk's elements (elem bytes each) out of the local tensor `local` (local_shape,
// row-major) into `out`, row-major in the chunk's shape.
void extract_chunk(const void* local, const Shape& local_shape, const LocalChunk& c, int64_t elem, void* out);

// Where a saved rectangle meets a rank's local tensor: per dimension, the pairs
// (local index, offset inside the rectangle) of the local elements that lie in it.
struct Overlap {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> dims;
  bool empty() const;
  int64_t numel() const;
  // The rows of the rectangle (offsets along dimension 0) that are needed: [first, last].
  int64_t first_row() const;
  int64_t last_row() const;
};
Overlap overlap(const std::vector<std::vector<int64_t>>& local_idx, const Rect& r);

// Copies the overlap from rectangle bytes `src` into the local tensor `dst` (local_shape).
// `src` holds the rectangle's rows [row0, ...) only (row0 <= ov.first_row()).
void scatter_overlap(const Overlap& ov, const Rect& r, int64_t row0, const void* src, const Shape& local_shape,
                     int64_t elem, void* dst);

}  // namespace parity::ckpt
