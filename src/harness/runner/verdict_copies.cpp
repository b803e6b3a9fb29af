// The compute_copy row's rank side (verdict_copies.h).
#include "harness/runner/verdict_copies.h"

#include <algorithm>
#include <cstring>

#include "core/fp8.h"
#include "core/fp8_delayed.h"
#include "core/precision.h"
#include "model/params.h"
#include "parallel/pmodel.h"

namespace parity::verdict_copies {

std::vector<int64_t> box_indices(const Shape& global, const Shape& box, const std::vector<int64_t>& offset) {
  const int64_t n = numel(box);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n));
  std::vector<int64_t> at(box.size(), 0);  // the box's multi-index, row-major
  for (int64_t i = 0; i < n; ++i) {
    int64_t flat = 0;
    for (size_t d = 0; d < box.size(); ++d) flat = flat * global[d] + offset[d] + at[d];
    out.push_back(flat);
    for (size_t d = box.size(); d-- > 0;) {
      if (++at[d] < box[d]) break;
      at[d] = 0;
    }
  }
  return out;
}

template <class T> CopyCheck<T>::CopyCheck(const ParallelRun<T>& par, const Scenario& s) : model_(s.model) {
  const bool fp8 = s.model.precision().fp8;
  for (const ParamSpec& p : par.specs()) {
    fp8_blocks_.push_back(fp8 ? fp8_weight_blocks(p) : 0);
    params_.push_back({p.name, p.shape, fp8_blocks_.back() > 0});
  }
  box_.resize(params_.size()), boxed_.assign(params_.size(), 0);
}

template <class T> void CopyCheck<T>::before_step(const ParallelRun<T>& par) {
  if (par.model().fp8.on()) fp8_ = par.model().fp8;
}

template <class T>
void CopyCheck<T>::append(const ParallelRun<T>& par, const std::vector<Tensor<T>>& before_base,
                          const std::vector<Tensor<T>>& before_local, const std::vector<std::vector<int64_t>>& idx,
                          std::vector<double>& out) {
  const Precision policy = model_.precision();
  const PrecisionScope scope(policy);  // fp8_on() reads it
  Fp8Delayed delayed = fp8_;  // fp8-delayed: the step's scales, in a scratch state (what it records is dropped)
  const Fp8StateScope fp8_state(delayed.on() ? &delayed : nullptr);
  const ParallelModel<T>& m = par.model();
  for (size_t q = 0; q < params_.size(); ++q) {
    compute_copy::CopyLocal c;
    // the premise: this rank's master shard before the step is the baseline's, bit for bit
    const Tensor<T>& full = before_base[q];
    bool equal = q < before_local.size() && q < idx.size() && before_local[q].data.size() == idx[q].size();
    for (size_t i = 0; equal && i < idx[q].size(); ++i)
      equal = std::memcmp(before_local[q].ptr() + i, full.ptr() + idx[q][i], sizeof(T)) == 0;
    c.masters_equal = equal ? 1 : 0;
    const Tensor<T>* got = m.compute_copy(q);
    if (!equal || got == nullptr) {
      c.pack(out);
      continue;
    }
    std::vector<int64_t>& box = box_[q];
    if (!boxed_[q]) {
      boxed_[q] = 1;
      const ShardedParam<T>& sp = m.params[q];
      std::vector<int64_t> offset;
      for (size_t d = 0; d < sp.mp_shape().size(); ++d) offset.push_back(sp.mp_offset(d));
      box = box_indices(params_[q].shape, sp.mp_shape(), offset);
    }
    const auto n = static_cast<int64_t>(box.size());
    if (got->numel() != n) {  // a piece of another shape than the plan's: every element differs
      c.gathered = 1, c.compared = c.differing = static_cast<double>(std::max(got->numel(), n));
      c.got = static_cast<double>(got->numel()), c.ref = static_cast<double>(n);
      c.pack(out);
      continue;
    }
    std::vector<T> master(static_cast<size_t>(n)), ref(static_cast<size_t>(n));  // host scratch
    for (int64_t i = 0; i < n; ++i) master[static_cast<size_t>(i)] = full.ptr()[box[static_cast<size_t>(i)]];
    if (const int64_t blocks = fp8_blocks_[q]; blocks > 0) {  // the scale is the whole tensor's (each expert's)
      std::vector<T> whole(full.data.begin(), full.data.end());
      round_to(policy.store, whole.data(), full.numel());
      fp8_tensors(whole.data(), blocks, full.numel() / blocks, nullptr, params_[q].name);
      for (size_t i = 0; i < box.size(); ++i) ref[i] = whole[static_cast<size_t>(box[i])];
    } else {
      ref = master;
      round_to(policy.store, ref.data(), n);
    }
    c = compute_copy::compare(got->ptr(), ref.data(), master.data(), n, box);
    c.pack(out);
  }
}

template class CopyCheck<float>;
template class CopyCheck<double>;

}  // namespace parity::verdict_copies
