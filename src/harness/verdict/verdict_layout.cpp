// The groups and rows of a model's verdict (verdict_detail.h VerdictLayout).
#include <string>

#include "harness/verdict/verdict_detail.h"

namespace parity::verdict_detail {

Row make_row(std::string quantity, std::string subject, double tol) {
  Row r;
  r.quantity = std::move(quantity), r.subject = std::move(subject), r.tol = tol;
  return r;
}

VerdictLayout verdict_layout(const std::vector<ParamSpec>& specs, const ModelConfig& c) {
  VerdictLayout v;
  std::vector<int> fam_group(kFamilyCount, -1);
  for (const ParamSpec& p : specs) {
    const auto f = static_cast<size_t>(p.family);
    if (fam_group[f] < 0)
      fam_group[f] = static_cast<int>(v.families.size()), v.families.push_back(p.family), v.elements.push_back(0);
    v.elements[static_cast<size_t>(fam_group[f])] += static_cast<double>(numel(p.shape));
    v.group_of.push_back(static_cast<size_t>(fam_group[f]));
  }
  const size_t n = v.families.size();
  const DType dt = c.dtype;
  v.groups.resize(2 * n);
  for (size_t p = 0; p < specs.size(); ++p)
    for (size_t k = 0; k < 2; ++k) {
      GroupSpec& G = v.groups[v.group_of[p] + k * n];
      G.quantity = k == 0 ? "grad" : "param", G.subject = std::string(family_name(specs[p].family));
      G.tol = tolerance_for(dt, k == 0 ? Quantity::gradient : Quantity::parameter);
      G.names.push_back(specs[p].name), G.shapes.push_back(specs[p].shape);
    }
  if (c.moe_layers() > 0) {
    GroupSpec tpe{"tokens_per_expert", "all MoE layers", Tolerance{0, 0}, 1.0, {}, {}};
    GroupSpec bias{"expert_bias", "all MoE layers", tolerance_for(dt, Quantity::parameter), 1.0, {}, {}};
    for (int64_t l = 0; l < c.moe_layers(); ++l) {
      const std::string pre = "layers." + std::to_string(c.dense_layers + l);
      tpe.names.push_back(pre + ".tokens_per_expert"), tpe.shapes.push_back({c.experts});
      bias.names.push_back(pre + ".expert_bias"), bias.shapes.push_back({c.experts});
    }
    v.groups.push_back(tpe), v.groups.push_back(bias);
  }
  const Tolerance lt = tolerance_for(dt, Quantity::loss), nt = tolerance_for(dt, Quantity::grad_norm);
  v.rows.push_back(make_row("loss", "all micro-batches", lt.norm_rel));
  v.rows.push_back(make_row("grad_norm", "", nt.norm_rel));
  v.rows.push_back(make_row("clip_coef", "", nt.norm_rel));
  for (const GroupSpec& g : v.groups) v.rows.push_back(make_row(g.quantity, g.subject, g.tol.norm_rel));
  for (int64_t l = 0; l < c.moe_layers(); ++l)
    v.rows.push_back(make_row("routing", "layers." + std::to_string(c.dense_layers + l), 0));
  return v;
}

}  // namespace parity::verdict_detail
