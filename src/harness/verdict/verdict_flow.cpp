#include "harness/verdict/verdict_flow.h"

#include <cmath>
#include <cstdlib>

namespace parity::verdict_flow {

// The head's gradient comes first, then the final LayerNorm's; each layer l (from the last)
// takes four slots: its MLP or MoE (experts, shared experts and router from the same upstream
// gradient), ln2, attention, ln1; the embedding is last (model/params.cpp's names), or first where
// it is the head too (tied).
int64_t backward_position(const std::string& name, int64_t layers, bool tied) {
  if (name.rfind("lm_head.", 0) == 0) return 0;
  if (name.rfind("final_ln.", 0) == 0) return 1;
  if (name.rfind("embed.", 0) == 0) return tied ? 0 : 2 + 4 * layers;
  if (name.rfind("layers.", 0) != 0) return -1;
  char* end = nullptr;
  const long l = std::strtol(name.c_str() + 7, &end, 10);
  if (end == nullptr || *end != '.' || l < 0 || l >= layers) return -1;
  const std::string part(end + 1);
  int64_t slot = 0;  // mlp / moe
  if (part.rfind("ln2.", 0) == 0) slot = 1;
  else if (part.rfind("attn.", 0) == 0) slot = 2;
  else if (part.rfind("ln1.", 0) == 0) slot = 3;
  return 2 + 4 * (layers - 1 - l) + slot;
}

FirstWrong first_wrong(const std::vector<double>& all, size_t stride, size_t at, int world,
                       const std::vector<size_t>& members, const std::vector<std::string>& names, int64_t layers,
                       double bound) {
  FirstWrong out;
  std::vector<double> d2(members.size(), 0.0), r2(members.size(), 0.0);
  double fam2 = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    for (int r = 0; r < world; ++r) {
      const double* x = all.data() + static_cast<size_t>(r) * stride + at + kTensorWidth * members[i];
      d2[i] += x[0], r2[i] += x[1];
    }
    fam2 += r2[i];
  }
  // a tensor's own norm, floored at the family's mean per tensor: a tensor whose true
  // gradient all but cancels has no relative error of its own
  const double floor2 = members.empty() ? 0.0 : fam2 / static_cast<double>(members.size());
  bool tied = true;  // no lm_head tensor: the embedding is the head
  for (const std::string& n : names) tied = tied && n.rfind("lm_head.", 0) != 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const size_t p = members[i];
    const double ref2 = r2[i] > floor2 ? r2[i] : floor2;
    const double rel = ref2 > 0 ? std::sqrt(d2[i] / ref2) : std::sqrt(d2[i]);
    if (rel <= bound) continue;  // NaN counts as wrong
    const int64_t pos = backward_position(names[p], layers, tied);
    if (pos >= 0 && (out.pos < 0 || pos < out.pos)) out = {pos, names[p]};
  }
  return out;
}

}  // namespace parity::verdict_flow
