// The root in data-flow order, tensor by tensor (harness/verdict/verdict_root.h): a family row
// aggregates tensors from every layer, so two families failing at the same step are ordered
// by their first wrong tensor in the backward pass (the head, the final LayerNorm, then each
// layer from the last: its MLP or MoE, ln2, attention, ln1; the embedding last). An
// attention-backward bug then names attention, not the LayerNorm upstream of it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace parity::verdict_flow {

// Where a parameter's gradient is produced in the backward pass (lower: earlier); -1 for
// a name the model does not use.
// tied: the model ties its embeddings (no lm_head tensor): the embedding's gradient starts with the
// head's, first.
int64_t backward_position(const std::string& name, int64_t layers, bool tied = false);

// One tensor's normwise sums, element by element: got g against the baseline's r. The same
// sums on a rank (append_tensor_sums) and in `parity compare` (dump_compare.cpp).
struct TensorSums {
  double d2 = 0, r2 = 0;  // sum of (g - r)^2, sum of r^2
  void add(double g, double r) { d2 += (g - r) * (g - r), r2 += r * r; }
};
inline constexpr size_t kTensorWidth = 2;

// Per tensor p: the normwise sums (diff^2, ref^2) over the elements this rank counts,
// appended to out (2 doubles per tensor). idx[p]: the global indices of p's local elements.
template <class T>
void append_tensor_sums(const std::vector<Tensor<T>>& got, const std::vector<Tensor<T>>& ref,
                        const std::vector<std::vector<int64_t>>& idx, const std::vector<char>& counted,
                        std::vector<double>& out) {
  for (size_t p = 0; p < idx.size(); ++p) {
    TensorSums s;
    if (counted[p] && p < got.size() && p < ref.size() && got[p].data.size() == idx[p].size())
      for (size_t i = 0; i < idx[p].size(); ++i)
        s.add(static_cast<double>(got[p].ptr()[i]), static_cast<double>(ref[p].ptr()[idx[p][i]]));
    out.insert(out.end(), {s.d2, s.r2});
  }
}

struct FirstWrong {
  int64_t pos = -1;    // backward_position of the earliest tensor over the bound; -1: none
  std::string tensor;  // its name
};
// Over every rank's part (world parts of `stride` doubles; the tensor sums at `at`): of the
// tensors `members` (indices into names), the earliest in the backward pass whose normwise
// error is over `bound`.
FirstWrong first_wrong(const std::vector<double>& all, size_t stride, size_t at, int world,
                       const std::vector<size_t>& members, const std::vector<std::string>& names, int64_t layers,
                       double bound);

}  // namespace parity::verdict_flow
