// FSDP / HSDP storage of one parameter on one rank. The parameter's TP-local tensor (its
// chunk over tp, or over etp for routed experts) is split on dim 0 over dp_shard by the
// torch.chunk ceil rule; this rank keeps its piece and is a replica over dp_replicate.
// That is exactly mesh::param_layout(): the constructor checks it element by element.
//
//   gather()  allgatherv over dp_shard -> the TP-local tensor the compute uses
//   reduce()  TP-local gradient -> reduce-scatter over dp_shard -> allreduce over
//             dp_replicate -> this rank's gradient shard (data-parallel sums, FOLDINGS.md)
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "mesh/mesh.h"
#include "mesh/placement.h"
#include "model/params.h"

namespace parity {

struct DataParallelGroups {
  comm::Communicator* dp_shard;
  comm::Communicator* dp_replicate;
};

template <class T> class ShardedParam {
 public:
  ShardedParam(const ParamSpec& spec, const mesh::Mesh& m, const mesh::Layout& layout, int rank, uint64_t seed,
               int64_t tp_rank, int64_t tp_size, int64_t dps, int64_t dp_shard);

  const ParamSpec& spec() const { return spec_; }
  const Shape& tp_local_shape() const { return tp_shape_; }
  int64_t tp_dim() const { return tp_dim_; }          // -1: replicated over TP
  int64_t tp_offset() const { return tp_offset_; }    // first global index along tp_dim

  Tensor<T> local;  // this rank's shard (local shape under the layout)

  // The TP-local tensor: every dp_shard piece, concatenated on dim 0.
  Tensor<T> gather(const DataParallelGroups& g) const;
  // Data-parallel reduction of a TP-local gradient into this rank's gradient shard.
  Tensor<T> reduce(const DataParallelGroups& g, const Tensor<T>& tp_local_grad) const;

 private:
  ParamSpec spec_;
  Shape tp_shape_;
  int64_t tp_dim_ = -1, tp_offset_ = 0;
  std::vector<int64_t> piece_counts_;  // elements of each dp_shard piece
};

}  // namespace parity
