// The whole model's hand-written backward against fp64 finite differences, on tiny
// configs covering dense and MoE layers, the shared expert, the aux loss, tied and untied
// heads, softmax and sigmoid scores, route_norm on and off, LayerNorm and RMSNorm.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/data.h"
#include "model/model.h"

namespace parity {
namespace {

struct Case {
  std::string name;
  ModelConfig cfg;
};

ModelConfig base_config() {
  ModelConfig c;
  c.vocab = 11, c.dim = 6, c.layers = 2, c.heads = 2, c.seq = 5, c.batch = 3, c.microbatches = 1;
  c.dense_layers = 1, c.mlp_hidden = 7, c.experts = 4, c.top_k = 2, c.expert_hidden = 5;
  c.shared_experts = 1, c.shared_hidden = 3, c.aux_alpha = 0.1;
  return c;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"dense_moe_shared_aux", base_config()});
  ModelConfig tied = base_config();
  tied.tie_embeddings = true;
  tied.shared_experts = 0;
  out.push_back({"tied_no_shared", tied});
  ModelConfig sig = base_config();
  sig.score = Score::sigmoid, sig.route_scale = 2.5, sig.top_k = 3;
  out.push_back({"sigmoid_scale_top3", sig});
  ModelConfig nonorm = base_config();
  nonorm.route_norm = false, nonorm.top_k = 1, nonorm.dense_layers = 0, nonorm.seq = 2;
  out.push_back({"all_moe_top1_no_norm_seq2", nonorm});
  ModelConfig dense = base_config();
  dense.dense_layers = 2, dense.layers = 2, dense.heads = 3;
  out.push_back({"all_dense_three_heads", dense});
  ModelConfig rms = base_config();  // issue 47: RMSNorm in every norm (no bias), tied head
  rms.norm = NormKind::rmsnorm, rms.tie_embeddings = true;
  out.push_back({"rmsnorm_tied", rms});
  ModelConfig qk = base_config();  // issue 47: per-head RMSNorm of q and k (Dh 3 over 2 heads)
  qk.qk_norm = true, qk.norm = NormKind::rmsnorm;
  out.push_back({"qk_norm_rmsnorm", qk});
  ModelConfig rope = base_config();  // issue 47: rotary positions, one head of Dh 6, a small base
  rope.position = Position::rope, rope.rope_theta = 10.0, rope.heads = 1;
  out.push_back({"rope_one_head_theta10", rope});
  ModelConfig qkr = base_config();  // issue 47: QK-norm, then rope (Qwen3's order), three heads of Dh 2
  qkr.qk_norm = true, qkr.norm = NormKind::rmsnorm, qkr.position = Position::rope, qkr.heads = 3;
  out.push_back({"qk_norm_rope_three_heads", qkr});
  ModelConfig mqa = base_config();  // issue 47: multi-query attention, two query heads reading one KV head
  mqa.kv_heads = 1;
  out.push_back({"mqa_two_heads", mqa});
  ModelConfig gqa = base_config();  // issue 47: grouped-query, 4 query heads over 2 KV heads, QK-norm and rope
  gqa.dim = 8, gqa.heads = 4, gqa.kv_heads = 2, gqa.qk_norm = true, gqa.norm = NormKind::rmsnorm;
  gqa.position = Position::rope, gqa.rope_theta = 10.0;
  out.push_back({"gqa_qk_norm_rope_four_heads_two_kv", gqa});
  return out;
}

class ModelGradient : public ::testing::TestWithParam<Case> {};

// Fourth-order central difference: error O(h^4). Measured on these configs: the worst
// normwise error goes 5.7e-9 (h 5e-4) -> 9.2e-8 (1e-3) -> 1.5e-6 (2e-3), i.e. truncation
// dominates and scales as h^4; at h 2.5e-4 rounding (~1e-16 * loss / h) is still far below.
double derivative(Model<double>& m, double* x, const std::vector<int64_t>& in, const std::vector<int64_t>& tg,
                  int64_t b, const std::vector<std::vector<int64_t>>& chosen0, bool& routing_changed) {
  const double h = 2.5e-4, x0 = *x;
  double f[4];
  const double offs[4] = {-2, -1, 1, 2};
  for (int i = 0; i < 4; ++i) {
    *x = x0 + offs[i] * h;
    MicroResult r = m.forward(in.data(), tg.data(), b);
    if (r.chosen != chosen0) routing_changed = true;
    f[i] = r.loss;
  }
  *x = x0;
  return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h);
}

TEST_P(ModelGradient, MatchesFiniteDifferences) {
  const ModelConfig c = GetParam().cfg;
  Model<double> m(c, 7);
  // Init is N(0, 0.02): attention would be nearly uniform and its q/k gradients tiny.
  // Larger weights make every path carry a gradient well above rounding noise.
  for (size_t p = 0; p < m.params.size(); ++p)
    if (m.params.specs[p].init_std > 0)
      for (auto& x : m.params.tensors[p].data) x *= 20;
  // a non-zero expert bias makes selection differ from plain top-k of the scores
  for (auto& bias : m.expert_bias)
    for (size_t e = 0; e < bias.size(); ++e) bias[e] = 0.01 * static_cast<double>(e % 3);
  MarkovData data(c.vocab, 3);
  std::vector<int64_t> in(static_cast<size_t>(c.batch * c.seq)), tg(in.size());
  data.batch(0, 0, c.batch, c.seq, in.data(), tg.data());
  m.grads.zero();
  MicroResult base = m.forward_backward(in.data(), tg.data(), c.batch);
  EXPECT_NEAR(base.loss, m.forward(in.data(), tg.data(), c.batch).loss, 0.0);

  int64_t skipped = 0, checked = 0;
  double worst = 0;
  for (size_t p = 0; p < m.params.size(); ++p) {
    Tensor<double>& w = m.params.tensors[p];
    const Tensor<double>& g = m.grads.tensors[p];
    double diff2 = 0, ref2 = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      bool changed = false;
      double fd = derivative(m, w.ptr() + i, in, tg, c.batch, base.chosen, changed);
      if (changed) {
        ++skipped;
        continue;
      }
      ++checked;
      diff2 += (fd - g.data[static_cast<size_t>(i)]) * (fd - g.data[static_cast<size_t>(i)]);
      ref2 += fd * fd;
    }
    const std::string& name = m.params.specs[p].name;
    EXPECT_GT(ref2, 0.0) << name << " has an all-zero gradient: the check would be vacuous";
    EXPECT_LE(std::sqrt(diff2 / ref2), 1e-7) << name << " (" << checked << " elements checked so far)";
    worst = std::max(worst, std::sqrt(diff2 / ref2));
  }
  EXPECT_LE(skipped, checked / 100) << "too many perturbations changed the routing";
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("worst normwise relative error %.3e over %lld elements (%lld skipped: routing changed)\n", worst,
              static_cast<long long>(checked), static_cast<long long>(skipped));
}

INSTANTIATE_TEST_SUITE_P(Configs, ModelGradient, ::testing::ValuesIn(cases()),
                         [](const auto& tp) { return tp.param.name; });

TEST(ModelGradient, MicroBatchesAddUpToTheFullBatch) {
  ModelConfig c = base_config();
  c.batch = 4;
  Model<double> whole(c, 3), split(c, 3);
  MarkovData data(c.vocab, 5);
  std::vector<int64_t> in(static_cast<size_t>(c.batch * c.seq)), tg(in.size());
  data.batch(2, 0, c.batch, c.seq, in.data(), tg.data());
  whole.grads.zero();
  split.grads.zero();
  double lw = whole.forward_backward(in.data(), tg.data(), 4).loss;
  double ls = split.forward_backward(in.data(), tg.data(), 1).loss;
  ls += split.forward_backward(in.data() + c.seq, tg.data() + c.seq, 3).loss;
  EXPECT_NEAR(lw, ls, 1e-14 * std::abs(lw));
  for (size_t p = 0; p < whole.grads.size(); ++p)
    for (size_t i = 0; i < whole.grads.tensors[p].data.size(); ++i)
      ASSERT_NEAR(whole.grads.tensors[p].data[i], split.grads.tensors[p].data[i], 1e-13)
          << whole.grads.specs[p].name << "[" << i << "]";
}

}  // namespace
}  // namespace parity
