#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/philox.h"
#include "model/params.h"

namespace parity {
namespace {

TEST(Params, RegistryHasEveryModelMdParameterOnce) {
  ModelConfig c;
  c.layers = 3, c.dense_layers = 1, c.shared_experts = 1;
  auto specs = param_specs(c);
  std::set<std::string> names;
  for (const auto& s : specs) EXPECT_TRUE(names.insert(s.name).second) << s.name;
  EXPECT_TRUE(names.count("embed.weight"));
  EXPECT_TRUE(names.count("layers.0.mlp.w2"));
  EXPECT_FALSE(names.count("layers.0.moe.router.gate"));
  EXPECT_TRUE(names.count("layers.2.moe.experts.w1"));
  EXPECT_TRUE(names.count("layers.2.moe.shared.w3"));
  EXPECT_TRUE(names.count("lm_head.weight"));
  // 1 embed + 3 * (4 LN + 4 attn) + dense 3 + 2 * (gate + 3 experts + 3 shared) + 2 final LN + head
  EXPECT_EQ(specs.size(), 1u + 3 * 8 + 3 + 2 * 7 + 2 + 1);
  c.tie_embeddings = true;
  for (const auto& s : param_specs(c)) EXPECT_NE(s.name, "lm_head.weight");
}

// issue 47: model.qk_norm adds q_norm and k_norm (Dh, init 1) after each layer's attn.wo.
TEST(Params, QkNormAddsTwoHeadSizedWeightsPerLayer) {
  ModelConfig c;
  c.layers = 2, c.dim = 8, c.heads = 2, c.qk_norm = true;
  const auto specs = param_specs(c);
  ParamSet<double> p = ParamSet<double>::initialised(specs, 1);
  EXPECT_EQ(p["layers.1.attn.q_norm.weight"].data, std::vector<double>(4, 1.0));
  EXPECT_EQ(p.index("layers.0.attn.k_norm.weight"), p.index("layers.0.attn.wo") + 2);
  c.qk_norm = false;
  EXPECT_EQ(specs.size(), param_specs(c).size() + 4);
}

// issue 47: RMSNorm's norms have a weight (init 1, the layernorm family) and no bias.
TEST(Params, RmsNormHasWeightsAndNoBias) {
  ModelConfig c;
  c.layers = 2, c.dim = 8, c.norm = NormKind::rmsnorm;
  const auto specs = param_specs(c);
  c.norm = NormKind::layernorm;
  EXPECT_EQ(specs.size() + 5, param_specs(c).size());  // ln1, ln2 per layer and final_ln lose their bias
  ParamSet<double> p = ParamSet<double>::initialised(specs, 1);
  for (const char* w : {"layers.0.ln1.weight", "layers.1.ln2.weight", "final_ln.weight"}) {
    EXPECT_EQ(p[w].data, std::vector<double>(8, 1.0)) << w;
    EXPECT_EQ(specs[static_cast<size_t>(p.index(w))].family, Family::layernorm) << w;
  }
  for (const auto& s : specs) EXPECT_EQ(s.name.find(".bias"), std::string::npos) << s.name;
}

TEST(Params, ShapesAndInitScalesFollowModelMd) {
  ModelConfig c;
  c.layers = 2, c.dim = 8, c.experts = 3, c.expert_hidden = 5;
  auto specs = param_specs(c);
  ParamSet<double> p = ParamSet<double>::initialised(specs, 1);
  EXPECT_EQ(p["layers.1.moe.experts.w1"].shape, (Shape{3, 8, 5}));
  EXPECT_EQ(p["layers.1.moe.experts.w2"].shape, (Shape{3, 5, 8}));
  EXPECT_EQ(p["layers.0.ln1.weight"].data, std::vector<double>(8, 1.0));
  EXPECT_EQ(p["layers.0.ln1.bias"].data, std::vector<double>(8, 0.0));
  const auto& wo = specs[static_cast<size_t>(p.index("layers.0.attn.wo"))];
  EXPECT_DOUBLE_EQ(wo.init_std, 0.02 / std::sqrt(4.0));
  EXPECT_THROW(p.index("nope"), Error);
}

// Layout independence: any slice, or any set of indices, equals the full tensor's elements.
TEST(Params, SlicesEqualTheFullTensorBitwise) {
  ParamSpec spec{"layers.1.moe.experts.w1", {4, 6, 5}, Family::routed_experts, 0.02};
  std::vector<double> full(120);
  init_range(spec, 99, 0, 120, full.data());
  std::vector<double> part(37);
  init_range(spec, 99, 41, 78, part.data());
  for (int i = 0; i < 37; ++i) ASSERT_EQ(part[static_cast<size_t>(i)], full[static_cast<size_t>(41 + i)]);
  std::vector<int64_t> idx{119, 0, 63, 5};
  std::vector<double> picked(4);
  init_elements(spec, 99, idx.data(), 4, picked.data());
  for (size_t i = 0; i < idx.size(); ++i) ASSERT_EQ(picked[i], full[static_cast<size_t>(idx[i])]);
  std::vector<float> f32(120);
  init_range(spec, 99, 0, 120, f32.data());
  for (size_t i = 0; i < 120; ++i) ASSERT_EQ(f32[i], static_cast<float>(full[i]));
}

// A tensor large enough to be drawn by several threads (params.cpp) has the bits of the one-element
// definition (core/philox.h) at every index, drawn as a range and by an index list.
TEST(Params, ALargeTensorDrawnInPartsHasEveryElementsOwnValue) {
  ParamSpec spec{"lm_head.weight", {3, 1 << 20}, Family::head, 0.02};
  const int64_t n = (int64_t{3} << 20) - 5, begin = 5;
  std::vector<float> got(static_cast<size_t>(n));
  init_range(spec, 7, begin, begin + n, got.data());
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = begin + n - 1 - i;  // reversed
  std::vector<float> picked(static_cast<size_t>(n));
  init_elements(spec, 7, idx.data(), n, picked.data());
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto want = static_cast<float>(0.02 * philox_normal(7, spec.name, static_cast<uint64_t>(begin + i)));
    differ += got[static_cast<size_t>(i)] != want;
    differ += picked[static_cast<size_t>(n - 1 - i)] != want;
  }
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace parity
