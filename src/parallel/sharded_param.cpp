#include "parallel/sharded_param.h"

#include <span>
#include <string>

#include "core/error.h"
#include "mesh/param_layout.h"

namespace parity {

namespace {

// Flat global indices of the TP-local tensor's dim-0 rows [r0, r1), in row-major order.
std::vector<int64_t> piece_global_indices(const Shape& global, const Shape& tp_shape, int64_t tp_dim,
                                          int64_t tp_offset, int64_t r0, int64_t r1) {
  std::vector<int64_t> out;
  const int64_t inner = numel(tp_shape) / (tp_shape.empty() || tp_shape[0] == 0 ? 1 : tp_shape[0]);
  Shape idx(tp_shape.size());
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t rem = i;  // unravel i over dims 1.. of tp_shape
      for (size_t d = tp_shape.size(); d-- > 1;) {
        idx[d] = rem % tp_shape[d];
        rem /= tp_shape[d];
      }
      idx[0] = r;
      int64_t flat = 0;
      for (size_t d = 0; d < global.size(); ++d)
        flat = flat * global[d] + idx[d] + (static_cast<int64_t>(d) == tp_dim ? tp_offset : 0);
      out.push_back(flat);
    }
  return out;
}

}  // namespace

template <class T>
ShardedParam<T>::ShardedParam(const ParamSpec& spec, const mesh::Mesh& m, const mesh::Layout& layout, int rank,
                              uint64_t seed, int64_t tp_rank, int64_t tp_size, int64_t dps, int64_t dp_shard)
    : spec_(spec), tp_shape_(spec.shape), tp_dim_(mesh::tp_shard_dim(spec)) {
  if (tp_dim_ >= 0) {
    mesh::Range r = mesh::chunk(spec.shape[static_cast<size_t>(tp_dim_)], tp_size, tp_rank);
    tp_shape_[static_cast<size_t>(tp_dim_)] = r.size();
    tp_offset_ = r.begin;
  }
  const int64_t rows = tp_shape_.empty() ? 1 : tp_shape_[0];
  const int64_t inner = rows == 0 ? 0 : numel(tp_shape_) / rows;
  for (int64_t i = 0; i < dp_shard; ++i) piece_counts_.push_back(mesh::chunk(rows, dp_shard, i).size() * inner);
  mesh::Range mine = mesh::chunk(rows, dp_shard, dps);
  std::vector<int64_t> idx = piece_global_indices(spec.shape, tp_shape_, tp_dim_, tp_offset_, mine.begin, mine.end);
  if (idx != mesh::global_indices(m, layout, spec.shape, rank))
    throw Error("ShardedParam: " + spec.name + " on rank " + std::to_string(rank) +
                ": FSDP x TP storage disagrees with mesh::param_layout " + mesh::layout_str(layout));
  Shape local_shape = tp_shape_;
  if (!local_shape.empty()) local_shape[0] = mine.size();
  local = Tensor<T>(local_shape);
  init_elements(spec, seed, idx.data(), static_cast<int64_t>(idx.size()), local.ptr());
}

template <class T> Tensor<T> ShardedParam<T>::gather(const DataParallelGroups& g) const {
  if (g.dp_shard->size() == 1) return local;
  Tensor<T> full(tp_shape_);
  g.dp_shard->allgatherv(std::span<const T>(local.data), std::span<T>(full.data),
                         std::span<const int64_t>(piece_counts_));
  return full;
}

template <class T>
Tensor<T> ShardedParam<T>::reduce(const DataParallelGroups& g, const Tensor<T>& tp_local_grad) const {
  Tensor<T> out(local.shape);
  if (g.dp_shard->size() == 1)
    out.data = tp_local_grad.data;
  else
    g.dp_shard->reduce_scatterv(std::span<const T>(tp_local_grad.data), std::span<T>(out.data),
                                std::span<const int64_t>(piece_counts_), comm::ReduceOp::sum);
  if (g.dp_replicate->size() > 1) g.dp_replicate->allreduce(std::span<T>(out.data), comm::ReduceOp::sum);
  return out;
}

template class ShardedParam<float>;
template class ShardedParam<double>;

}  // namespace parity
