// redistribute: a rank's local tensor under one layout -> its local tensor under another,
// with collectives over the world communicator. Every rank of the world calls it with the
// same mesh, shape and layouts. The result is bitwise shard(to, x) when the input is
// shard(from, x) (values are moved, and Partial addends are summed in the same order as
// assemble()); the two layouts may be of different views.
//
// Steps: (1) each Partial dimension of `from`, left to right: allgather the addends over
// that dimension's group and sum them in coordinate order; (2) one alltoallv over the world
// moves every element a rank needs from one holder: the rank itself when it holds it, else
// the holder that shares its coordinates on `from`'s non-sharding dimensions; (3) ranks
// that are not the Partial root of `to` hold -0.0 (shard.h).
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "mesh/mesh.h"
#include "mesh/placement.h"

namespace parity::mesh {

// What one rank sends and receives in step (2). Indexed by world rank; positions are flat
// indices into the local tensors (from: after step (1); to: the result).
struct RedistributePlan {
  std::vector<int64_t> send_counts, recv_counts;  // (W)
  std::vector<int64_t> send_pos;  // (sum send_counts) positions in the `from` local, grouped by receiver
  std::vector<int64_t> recv_pos;  // (sum recv_counts) positions in the `to` local, grouped by sender
};

RedistributePlan plan_redistribute(const Mesh& m, const Shape& shape, const TensorLayout& from, const TensorLayout& to,
                                   int rank);

template <comm::CommElement T>
Tensor<T> redistribute(comm::Communicator& world, const Mesh& m, const Shape& shape, const TensorLayout& from,
                       const Tensor<T>& local, const TensorLayout& to);

}  // namespace parity::mesh
