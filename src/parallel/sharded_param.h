// FSDP / HSDP storage of one parameter on one rank. The parameter's model-parallel-local
// tensor (its chunk over tp; for routed experts, over ep on the expert dimension and over
// etp on the hidden one) is split on its FSDP dimension d (mesh::fsdp_shard_dim: 0 unless
// layout.fsdp_dim says otherwise) over the FSDP group (dp_shard; edp_shard for routed
// experts) by the torch.chunk ceil rule; this rank keeps its piece and is a replica over
// dp_replicate. The chunks and the groups are the parameter's plan entry's (parallel/param_plan.h:
// read off its placements); the constructor checks the storage against those placements
// element by element (an assertion of the derivation, not a second author).
//
//   gather()  allgatherv over the FSDP group -> the model-parallel-local tensor
//   reduce()  model-parallel-local gradient -> reduce-scatter over the FSDP group ->
//             allreduce over dp_replicate -> this rank's gradient shard (FOLDINGS.md:
//             data-parallel contributions are sums)
//
// The collectives move pieces: piece i is the mp-local tensor's indices chunk(len_d, n, i)
// along d, row-major. For d = 0 the pieces are consecutive in the mp-local tensor and move
// in place; for d > 0 the tensor is packed (piece after piece) before a reduce-scatter and
// unpacked after an all-gather, as FSDP2 does for Shard(d) (chunk + cat on dim d). Packing
// copies values, so results are bitwise those of d = 0 on the same elements.
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
  comm::Communicator* fsdp;       // dp_shard (dense) or edp_shard (routed experts); nullptr: not sharded
  comm::Communicator* replicate;  // dp_replicate (dense: dp_replicate x cp; routed experts: dp_replicate)
};

// One model-parallel split: tensor dimension `dim` chunked into n pieces, this rank's is i.
struct MpChunk {
  int64_t dim, n, i;
};

template <class T> class ShardedParam {
 public:
  ShardedParam(const ParamSpec& spec, const mesh::Mesh& m, const mesh::TensorLayout& layout, int rank, uint64_t seed,
               const std::vector<MpChunk>& mp, DataParallelGroups groups);

  const ParamSpec& spec() const { return spec_; }
  const Shape& mp_shape() const { return mp_shape_; }
  int64_t mp_offset(size_t dim) const { return mp_offset_[dim]; }  // first global index held along dim
  bool mp_sharded() const { return mp_sharded_; }                  // false: every lane holds it all

  Tensor<T> local;  // this rank's shard (local shape under the layout)

  Tensor<T> gather() const;
  Tensor<T> reduce(const Tensor<T>& mp_local_grad) const;

  const DataParallelGroups& groups() const { return groups_; }
  const std::vector<MpChunk>& mp() const { return mp_; }  // as constructed
  // This rank's piece of an mp-local tensor (its FSDP piece: a copy of the elements `local` holds).
  Tensor<T> piece(const Tensor<T>& mp_local) const;
  const std::vector<int64_t>& piece_counts() const { return piece_counts_; }
  int64_t fsdp_dim() const { return fsdp_dim_; }

  // The mp-local tensor as its FSDP pieces, piece after piece (a copy of its data when the
  // pieces are consecutive), and back.
  Buffer<T> pack(const Tensor<T>& mp_local) const;
  Tensor<T> unpack(Buffer<T> packed) const;
  bool pieces_consecutive() const { return outer_ == 1; }

 private:
  ParamSpec spec_;
  std::vector<MpChunk> mp_;
  Shape mp_shape_;
  std::vector<int64_t> mp_offset_;
  bool mp_sharded_ = false;
  DataParallelGroups groups_;
  std::vector<int64_t> piece_counts_;  // elements of each FSDP piece
  int64_t fsdp_dim_ = 0;
  int64_t outer_ = 1, inner_ = 1;            // elements before / after fsdp_dim_ in the mp-local tensor
  std::vector<mesh::Range> pieces_;          // each piece's range along fsdp_dim_
};

// The same for several parameters that share their data-parallel groups, in one
// collective each (a flat FSDP unit): rank i's block is the concatenation of every
// parameter's piece i. Results are bitwise those of the per-parameter calls.
template <class T> std::vector<Tensor<T>> gather_all(const std::vector<const ShardedParam<T>*>& ps);
template <class T>
std::vector<Tensor<T>> reduce_all(const std::vector<const ShardedParam<T>*>& ps,
                                  const std::vector<const Tensor<T>*>& mp_local_grads);

}  // namespace parity
