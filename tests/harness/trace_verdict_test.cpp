// The trace's verdict on hand-made sums (harness/verdict/trace_verdict.h): the first key over its
// bound in data-flow order is named with the rank that holds its worst element; a key traced on
// fewer elements than its full tensor is named "not mapped", never passed.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "harness/verdict/trace_verdict.h"

namespace parity {
namespace {

using trace_verdict::Sums;

const trace_verdict::StepShape kShape{2, 1, 4, 8, 16, 1, 0, 0, 0};  // batch 2, seq 4, dim 8, vocab 16, 1 layer

// Every rank's sums: each key fully traced on rank 0, equal to the baseline (ref 1 everywhere).
std::vector<Sums> clean(const std::vector<trace::Key>& keys) {
  std::vector<Sums> s(keys.size());
  for (size_t k = 0; k < keys.size(); ++k)
    for (int64_t i = 0; i < static_cast<int64_t>(kShape.elements(keys[k].site)); ++i) s[k].add(1.0, 1.0, i);
  return s;
}

std::vector<double> packed(const std::vector<std::vector<Sums>>& ranks) {
  std::vector<double> out;
  for (const auto& r : ranks)
    for (const Sums& s : r) s.pack(out);
  return out;
}

trace_verdict::Result verdict(const std::vector<std::vector<Sums>>& ranks, const std::vector<trace::Key>& keys) {
  return trace_verdict::first_diverging(keys, packed(ranks), static_cast<int>(ranks.size()),
                                        std::vector<double>(keys.size(), 1e-11), {"tp 0", "tp 1"}, kShape, {});
}

size_t index_of(const std::vector<trace::Key>& keys, trace::Key k) {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == k) return i;
  return keys.size();
}

TEST(TraceVerdict, FirstOverItsBoundInDataFlowOrderWithItsRankAndElement) {
  const auto keys = trace::flow_keys(1);
  std::vector<std::vector<Sums>> ranks{clean(keys), std::vector<Sums>(keys.size())};
  // rank 1 holds a second copy of layer 0's v and of the logits' gradient, each one element off
  const size_t v = index_of(keys, {trace::Site::v, 0, trace::Dir::fwd});
  const size_t dl = index_of(keys, {trace::Site::logits, 1, trace::Dir::bwd});
  ranks[1][dl].add(3.0, 1.0, 17);
  ranks[1][v].add(1.5, 1.0, 8 * 5 + 2);  // token 5 (sequence 1, position 1), column 2
  const auto r = verdict(ranks, keys);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.root.rfind("layer 0 v, forward, micro-batch 0, rank 1 (tp 1), element [sequence 1, position 1, "
                         "column 2] 1.5 against 1:",
                         0),
            0u)
      << r.root;
}

TEST(TraceVerdict, AKeyTracedOnFewerElementsThanItsTensorIsNotMappedNeverPassed) {
  const auto keys = trace::flow_keys(1);
  std::vector<Sums> one = clean(keys);
  const size_t q = index_of(keys, {trace::Site::q, 0, trace::Dir::bwd});
  one[q] = Sums{};
  for (int64_t i = 0; i < 40; ++i) one[q].add(1.0, 1.0, i);  // 40 of 64
  const auto r = verdict({one}, keys);
  EXPECT_FALSE(r.found);
  bool named = false;
  for (const auto& l : r.lines) named |= l == "  not mapped: layer 0 q, backward (40 of 64 elements traced)";
  EXPECT_TRUE(named) << ::testing::PrintToString(r.lines);
}

}  // namespace
}  // namespace parity

namespace parity {
namespace {

// fp16 (issue 48): a step both sides skip carries the same overflow, an infinity, and the NaN it
// makes downstream, in the baseline's and the layout's traced tensors: equal, not a divergence;
// an infinity against a finite value still is one.
TEST(TraceVerdict, TheSameInfinityOrNanOnBothSidesIsEqual) {
  Sums s;
  s.add(-INFINITY, -INFINITY, 0);
  s.add(NAN, NAN, 1);
  s.add(1.0, 1.0, 2);
  EXPECT_EQ(s.diff2, 0.0);
  EXPECT_EQ(s.worst, 0.0);
  Sums t;
  t.add(-INFINITY, -1.0, 0);
  EXPECT_TRUE(std::isinf(t.diff2));
  EXPECT_EQ(t.worst_index, 0.0);
}

// Grouped-query attention: k and v have kv_dim columns (fewer than dim). A key traced on every one
// of its elements is compared, not named "not mapped" for the dim - kv_dim columns it does not have.
TEST(TraceVerdict, GroupedQueryKeysAndValuesHaveTheirOwnColumns) {
  trace_verdict::StepShape gqa = kShape;
  gqa.kv_dim = 4;  // 1 key / value head of 4 against 2 query heads' 8 columns
  EXPECT_EQ(gqa.elements(trace::Site::k), 2.0 * 4 * 4);
  EXPECT_EQ(gqa.elements(trace::Site::q), 2.0 * 4 * 8);
  const std::vector<trace::Key> keys{{trace::Site::k, 0, trace::Dir::fwd}};
  std::vector<Sums> s(1);
  for (int64_t i = 0; i < 2 * 4 * 4; ++i) s[0].add(1.0, 1.0, i);
  const auto r = trace_verdict::first_diverging(keys, packed({s}), 1, {1e-11}, {""}, gqa, {});
  EXPECT_FALSE(r.found);
  for (const std::string& line : r.lines) EXPECT_EQ(line.find("not mapped"), std::string::npos) << line;
}

}  // namespace
}  // namespace parity

namespace parity {
namespace {

// Issue 45 item 5: every parameter's gradient names the traced ops it is computed from (the root of a
// reduction bug names one), each a key the model records, in its own layer; a tied embedding's both.
TEST(TraceVerdict, EveryParameterGradientNamesTracedOpsOfItsLayer) {
  ModelConfig c;
  c.layers = 3, c.dense_layers = 1, c.shared_experts = 1, c.qk_norm = true, c.tie_embeddings = true;
  c.norm = NormKind::layernorm;
  const std::vector<trace::Key> keys = trace_verdict::trace_keys(c);
  const auto reduced = trace_verdict::reduced_after(c, {{"layers.2.moe.router.gate", "summed over tp (2 ranks)"}});
  const std::vector<ParamSpec> specs = param_specs(c);
  ASSERT_EQ(reduced.size(), specs.size());
  for (const ParamSpec& p : specs) {
    const std::vector<trace::Key> from = trace_verdict::grad_sources(p.name, c);
    ASSERT_FALSE(from.empty()) << p.name;
    for (const trace::Key& k : from) {
      EXPECT_EQ(k.dir, trace::Dir::bwd) << p.name;
      EXPECT_LT(index_of(keys, k), keys.size()) << p.name << ": " << trace::key_name(k, c.layers);
      if (p.name.rfind("layers.", 0) == 0) {
        EXPECT_EQ(p.name.substr(7, 2), std::to_string(k.layer) + ".") << p.name;
      }
    }
  }
  EXPECT_EQ(trace_verdict::grad_sources("embed.weight", c).size(), 2u);
  EXPECT_TRUE(trace_verdict::grad_sources("layers.9x.attn.wq", c).empty());
  for (const auto& [name, words] : reduced) {
    if (name == "layers.2.moe.router.gate") {
      EXPECT_EQ(words,
                "`layer 2 router, backward` (within its bound), in the partial sums of layers.2.moe.router.gate's "
                "gradient computed from it or in their reduction (the plan: summed over tp (2 ranks))");
    } else if (name == "layers.1.attn.q_norm.weight") {
      EXPECT_EQ(words.substr(0, 24), "`layer 1 q, backward` (w");
    }
  }
}

}  // namespace
}  // namespace parity
