// The third measure of a param row (docs/verdict.md "What is compared", issue 41): the gradient
// each parameter's optimizer took, read back from its first moment, against the baseline's
// gradient times its clip coefficient. Adam's update hardly moves when a family's gradient is
// scaled (m / sqrt(v)), so a clip that skips a family shows on the parameters only through eps:
// 2.3x its bound in bf16. Its first moment takes the gradient as it is: m_t = b1 m_(t-1) +
// (1 - b1) d (sgd: m_t = mu m_(t-1) + d), d the clipped gradient plus the weight decay where it
// enters the moment (sgd, adam; not adamw's). The moments are this rank's own (the step-local
// verdict never overwrites them), read before and after the step, so d is this step's alone.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/tensor.h"
#include "harness/verdict/tolerance.h"
#include "harness/verdict/verdict.h"
#include "mesh/placement.h"
#include "model/config.h"
#include "model/params.h"

namespace parity::verdict_taken {

// Per parameter of this rank: its first moment's global indices, whether this rank counts them,
// and the moment's values before the step (empty: no first moment here).
struct Moments {
  std::vector<std::vector<int64_t>> idx;
  std::vector<char> counted;
  std::vector<std::vector<double>> before;
};

// The entry "optim.m.NAME" of each parameter in `st`, as its local tensor (nullptr: none).
template <class T>
std::vector<const Tensor<T>*> first_moments(const ckpt::ShardedState& st, const std::vector<ParamSpec>& specs,
                                            std::vector<mesh::TensorLayout>* layouts = nullptr) {
  std::vector<const Tensor<T>*> out(specs.size(), nullptr);
  if (layouts) layouts->assign(specs.size(), mesh::TensorLayout{});
  for (size_t p = 0; p < specs.size(); ++p)
    for (const ckpt::StateEntry& e : st.entries())
      if (e.name == "optim.m." + specs[p].name)
        if (auto* t = std::get_if<Tensor<T>*>(&e.local)) {
          out[p] = *t;
          if (layouts) (*layouts)[p] = e.layout;
        }
  return out;
}

// Before the step: where each moment lives (once) and its values now.
template <class T>
void before_step(Moments& mo, const ckpt::ShardedState& st, const std::vector<ParamSpec>& specs,
                 const mesh::Mesh& mesh, int rank) {
  std::vector<mesh::TensorLayout> layouts;
  const std::vector<const Tensor<T>*> m = first_moments<T>(st, specs, &layouts);
  if (mo.idx.empty()) {
    mo.idx.resize(specs.size()), mo.counted.assign(specs.size(), 0);
    for (size_t p = 0; p < specs.size(); ++p)
      if (m[p])
        mo.idx[p] = mesh::global_indices(mesh, layouts[p], specs[p].shape, rank),
        mo.counted[p] = counted_copy(mesh, layouts[p], rank) ? 1 : 0;
  }
  mo.before.assign(specs.size(), {});
  for (size_t p = 0; p < specs.size(); ++p)
    if (m[p]) mo.before[p].assign(m[p]->data.begin(), m[p]->data.end());
}

// After the step: per family group, the sums (diff2, ref2, dot) of the taken gradient against
// the baseline's (clip_ref x its gradient, + weight decay x its parameter before the step where
// the moment takes it), its far elements (tolerance.h is_far, against the family's rms of the
// baseline's, or gradient_magnitude's), the elements counted, and the sum of squares of what reading d back from the
// moment may round (4 units of T's roundoff x (|m_t| + b1 |m_(t-1)|) / (1 - b1) per element:
// where the gradient is small next to its moment, late in a run, d is a difference of nearly
// equal values; an element within it is not far), over this rank's counted elements.
inline constexpr size_t kWidth = 6;
template <class T>
void append_sums(const Moments& mo, const ckpt::ShardedState& st, const std::vector<ParamSpec>& specs,
                 const OptimConfig& o, double clip_ref, const std::vector<Tensor<T>>& base_grads,
                 const std::vector<Tensor<T>>& base_before, const std::vector<size_t>& group_of_param,
                 size_t groups, std::vector<double>& out) {
  const std::vector<const Tensor<T>*> m = first_moments<T>(st, specs);
  const bool sgd = o.kind == OptimKind::sgd;
  // the optimizer's own constants, in T (optim/optimizer.cpp)
  const auto b = static_cast<T>(sgd ? o.momentum : o.beta1);
  const double keep = static_cast<double>(b), take = sgd ? 1.0 : static_cast<double>(T(1) - b);
  const double u = static_cast<double>(std::numeric_limits<T>::epsilon()) / 2;
  const double wd = o.kind == OptimKind::adamw ? 0.0 : o.weight_decay;
  std::vector<double> s(kWidth * groups, 0.0), sq(groups, 0.0), n(groups, 0.0);
  auto ref = [&](size_t p, size_t j) {
    return clip_ref * static_cast<double>(base_grads[p].ptr()[j]) + wd * static_cast<double>(base_before[p].ptr()[j]);
  };
  for (size_t p = 0; p < specs.size() && p < base_grads.size() && p < base_before.size(); ++p)
    for (size_t j = 0; j < static_cast<size_t>(base_grads[p].numel()); ++j)
      sq[group_of_param[p]] += ref(p, j) * ref(p, j), n[group_of_param[p]] += 1;
  double model_sq = 0, model_n = 0;  // a family far below the model's gradient (tolerance.h gradient_magnitude)
  for (size_t g = 0; g < groups; ++g) model_sq += sq[g], model_n += n[g];
  const double model_rms = model_n > 0 ? std::sqrt(model_sq / model_n) : 0.0;
  for (size_t p = 0; p < specs.size() && p < mo.idx.size(); ++p) {
    if (!m[p] || !mo.counted[p] || m[p]->data.size() != mo.idx[p].size() || p >= base_grads.size() ||
        p >= base_before.size())
      continue;
    const bool zero = mo.before[p].size() != mo.idx[p].size();  // not yet allocated: zeros
    const size_t g = group_of_param[p];
    const double rms = gradient_magnitude(n[g] > 0 ? std::sqrt(sq[g] / n[g]) : 0.0, model_rms);
    double* acc = s.data() + kWidth * g;
    for (size_t i = 0; i < mo.idx[p].size(); ++i) {
      const auto j = static_cast<size_t>(mo.idx[p][i]);
      const double mt = static_cast<double>(m[p]->data[i]), m0 = zero ? 0.0 : mo.before[p][i];
      const double d = (mt - keep * m0) / take, r = ref(p, j);
      const double e = 4 * u * (std::abs(mt) + keep * std::abs(m0)) / take;  // reading d back
      acc[0] += (d - r) * (d - r), acc[1] += r * r, acc[2] += d * r;
      acc[3] += std::abs(d - r) > e && is_far(d, r, rms), acc[4] += 1, acc[5] += e * e;
    }
  }
  out.insert(out.end(), s.begin(), s.end());
}

}  // namespace parity::verdict_taken
