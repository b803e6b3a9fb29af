// shard(global) -> the local tensor of one rank; assemble(locals of every rank) -> global.
// Both follow placement.h exactly; the values are copied, never recomputed, so
// assemble(shard(x)) is x bitwise for every layout.
//
// Partial(sum): shard() gives the value to the ranks whose coordinate is 0 on every Partial
// dimension and -0.0 (the exact additive identity: x + -0.0 == x bitwise, including x = +0.0
// and x = -0.0) to the others. assemble() and redistribute() sum the addends of each Partial
// dimension, left to right, in coordinate order: acc = x_0; acc += x_1; ... .
#pragma once
#include <type_traits>
#include <vector>

#include "core/tensor.h"
#include "mesh/mesh.h"
#include "mesh/placement.h"

namespace parity::mesh {

// The additive identity that keeps every value's bits: -0.0 for floating point, 0 for integers.
template <class T> constexpr T additive_identity() {
  if constexpr (std::is_floating_point_v<T>) return T(-0.0);
  else return T(0);
}

template <class T> Tensor<T> shard(const Mesh& m, const TensorLayout& l, const Tensor<T>& global, int rank);

// What assemble() does when two ranks hold different bits for the same element (after
// Partial dimensions are summed): must_agree throws Error naming the element and the ranks;
// take_first keeps the lowest rank's copy.
enum class Replicas { must_agree, take_first };

// locals[r] is rank r's local tensor (shape local_shape(m, l, shape, r)).
template <class T>
Tensor<T> assemble(const Mesh& m, const TensorLayout& l, const Shape& shape, const std::vector<Tensor<T>>& locals,
                   Replicas replicas = Replicas::must_agree);

// Sums the addends of every Partial dimension of l, left to right in coordinate order, and
// returns the locals with those dimensions Replicate (the layout partials_resolved(l)).
template <class T>
std::vector<Tensor<T>> reduce_partials(const Mesh& m, const TensorLayout& l, std::vector<Tensor<T>> locals);
TensorLayout partials_resolved(const TensorLayout& l);

}  // namespace parity::mesh
