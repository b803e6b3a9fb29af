// verdict_root.h: the earliest failing step, the first failing quantity in data-flow order
// at that step, and the clean factor its scale ratio names.
#include "harness/verdict/verdict_root.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "harness/verdict/verdict.h"
#include "harness/verdict/verdict_flow.h"
#include "mesh/layout_config.h"

namespace parity::verdict_root_test {  // one namespace per file: the tests build as unity batches
namespace {

Row row(const std::string& q, const std::string& subject, int64_t step, double scale, RowVerdict v = RowVerdict::fail) {
  Row r;
  r.quantity = q, r.subject = subject, r.step = step, r.scale_ratio = scale, r.verdict = v;
  return r;
}

// A failing row with its measures: normwise error and bound, far fraction and far bound.
Row graded(const std::string& q, const std::string& sub, int64_t step, double scale, double err, double tol,
           double far, double far_bound, const std::string& from) {
  Row r = row(q, sub, step, scale);
  r.norm_rel = err, r.tol = tol, r.far = far, r.far_bound = far_bound, r.bound_from = from;
  return r;
}

TEST(VerdictRoot, EarliestStepThenDataFlowOrder) {
  VerdictReport rep;
  rep.degrees = named_factors({{"tp", 2}, {"ep", 2}, {"etp", 1}, {"dp", 4}, {"world", 8}}, 1);
  rep.rows = {row("param", "router", 0, 1.3), row("loss", "", 1, 1.01), row("grad", "attention", 0, 1.2),
              row("grad", "router", 0, 0.686), row("grad_norm", "", 0, 1.0001), row("routing", "layer 1", 2, NAN),
              row("grad", "head", 3, 1.0, RowVerdict::near_tie)};
  const RootCause root = find_root(rep);
  ASSERT_TRUE(root.found);
  EXPECT_EQ(rep.rows[root.row].quantity, "grad");
  EXPECT_EQ(rep.rows[root.row].subject, "router");  // backward reaches the router before attention
  EXPECT_EQ(root.step, 0);
  EXPECT_EQ(root.factor, "not a clean factor");
  EXPECT_EQ(root.same_step.size(), 3u);     // param router, grad attention, grad_norm
  EXPECT_EQ(root.consequences.size(), 2u);  // loss (step 1), routing (step 2); the near-tie is no failure
  const std::string line = root_line(rep, root);
  EXPECT_NE(line.find("root: grad router at step 0, scale 0.686000 -> not a clean factor"), std::string::npos) << line;
  EXPECT_NE(line.find("2 rows fail only from later steps (consequences)"), std::string::npos) << line;
}

// Tied embeddings (no head family): the embedding is the head, its gradient the backward's first;
// untied, the embedding is the backward's last (sixth round: a tied shape's head bugs were named at
// the final norm).
TEST(VerdictRoot, TiedEmbeddingRanksAsTheHead) {
  VerdictReport tied;
  tied.rows = {row("grad", "layernorm", 0, 0.5), row("grad", "embedding", 0, 0.5)};
  const RootCause a = find_root(tied);
  ASSERT_TRUE(a.found);
  EXPECT_EQ(tied.rows[a.row].subject, "embedding");
  VerdictReport untied = tied;
  untied.rows.push_back(row("grad", "head", 0, 1.0, RowVerdict::ok));
  const RootCause b = find_root(untied);
  ASSERT_TRUE(b.found);
  EXPECT_EQ(untied.rows[b.row].subject, "layernorm");
  EXPECT_EQ(verdict_flow::backward_position("embed.weight", 2, true), 0);
  EXPECT_EQ(verdict_flow::backward_position("embed.weight", 2, false), 10);
}

TEST(VerdictRoot, NamesCleanFactorsByTheLayoutsDegrees) {
  const LayoutDegrees d = named_factors({{"tp", 4}, {"ep", 2}, {"dp", 2}, {"world", 8}}, 1);
  EXPECT_EQ(factor_meaning(4.0, d).rfind("4 (= tp)", 0), 0u) << factor_meaning(4.0, d);
  EXPECT_EQ(factor_meaning(0.25, d).rfind("1/4 (= 1/tp)", 0), 0u) << factor_meaning(0.25, d);
  EXPECT_EQ(factor_meaning(2.0, d).rfind("2 (= ep) or 2 (= dp)", 0), 0u) << factor_meaning(2.0, d);
  EXPECT_EQ(factor_meaning(0.5000004, d).rfind("1/2 (= 1/ep)", 0), 0u) << factor_meaning(0.5, d);
  EXPECT_EQ(factor_meaning(8.0, d).rfind("8 (= world)", 0), 0u);
  EXPECT_EQ(factor_meaning(2.0, LayoutDegrees{}).rfind("2: doubled", 0), 0u);
  EXPECT_EQ(factor_meaning(0.0, d).rfind("0: missing", 0), 0u);
  EXPECT_EQ(factor_meaning(1.00001, d).rfind("1: not a scaling", 0), 0u);
  EXPECT_EQ(factor_meaning(-1.0, d).rfind("-1: sign", 0), 0u);
  EXPECT_EQ(factor_meaning(3.0, d), "not a clean factor");
  EXPECT_EQ(factor_meaning(NAN, d), "no scale ratio");
}

// Issue 41: rows a little over their bounds, no clean factor, few far elements: the root line
// says "at rounding level" with the largest ratio, not "a different computation". Over
// kRoundingLevel (4) in either measure, most elements far, or a clean factor: it does not.
TEST(VerdictRoot, RoundingLevelIsToldFromABug) {
  VerdictReport rep;
  rep.degrees = named_factors({{"dp", 2}, {"world", 2}}, 1);
  rep.rows = {graded("grad", "attention", 3, 0.99999, 4.6e-4, 2.4e-4, 0.063, 0.05, "floor"),
              graded("param", "attention", 3, 1.00002, 1.3e-3, 1e-3, 0.01, 0.05, "floor")};
  RootCause root = find_root(rep);
  EXPECT_EQ(root.factor.rfind("at rounding level: 1.9x the bound at most", 0), 0u) << root.factor;
  EXPECT_TRUE(root.rounding);  // what makes the verdict measure it again (verdict_run.cpp measure_again)
  rep.rows[1].norm_rel = 5e-3;  // a same-step row 5x over: not rounding
  EXPECT_EQ(find_root(rep).factor.rfind("1: not a scaling", 0), 0u) << find_root(rep).factor;
  EXPECT_FALSE(find_root(rep).rounding);
  rep.rows.resize(1);
  rep.rows[0].far = 0.25;  // 5x the far bound
  EXPECT_EQ(find_root(rep).factor.rfind("1: not a scaling", 0), 0u) << find_root(rep).factor;
  rep.rows[0].far = 0.84;  // most elements far: a rounding to bf16 moves 3/4 ...
  EXPECT_FALSE(find_root(rep).rounding) << find_root(rep).factor;
  rep.rows[0].far_bound = 3.6;  // ... unless the twins had as many far (an fp8 router of 64 elements, cal01011,
  rep.rows[0].worst.ref = 1e-3, rep.rows[0].worst.got = 1.2e-3;  // whose worst element moved 20%: no bf16 rounding)
  EXPECT_EQ(find_root(rep).factor.rfind("at rounding level: 1.9x", 0), 0u) << find_root(rep).factor;
  rep.rows[0].far_bound = 0.05, rep.rows[0].worst = {};
  rep.rows[0].far = 0.063, rep.rows[0].norm_rel = 3.9 * 2.4e-4;  // just under kRoundingLevel
  EXPECT_EQ(find_root(rep).factor.rfind("at rounding level: 3.9x", 0), 0u) << find_root(rep).factor;
  rep.rows[0].scale_ratio = 2.0;  // a clean factor is never rounding
  EXPECT_EQ(find_root(rep).factor.rfind("2 (= dp)", 0), 0u) << find_root(rep).factor;
  rep.rows[0].norm_rel = 0.5 * 2.4e-4, rep.rows[0].far = 0.01;  // failed by something else (a count, a part)
  EXPECT_EQ(find_root(rep).factor.find("rounding level"), std::string::npos) << find_root(rep).factor;
  rep.rows[0].scale_ratio = 1.0, rep.rows[0].bound_from = "exact", rep.rows[0].quantity = "routing";
  EXPECT_EQ(find_root(rep).factor.find("rounding level"), std::string::npos) << find_root(rep).factor;
}

// Nineteenth round: a grad norm failed by a family's part alone (its total within its bound) leaves the level to
// that family's own row (fp8-delayed cal20037); under an fp8 policy a row with most elements far is at rounding
// level up to kRoundingLevel times the twins' far fraction (cal01011 at twin stream 1: 58% against a bound of 29%),
// elsewhere up to that fraction itself.
TEST(VerdictRoot, AGradNormFailedByAFamilyAndAnFp8FlipsFarElementsAreRounding) {
  VerdictReport rep;
  rep.precision = "fp8-delayed";
  rep.degrees = named_factors({{"tp", 2}, {"world", 2}}, 1);
  Row norm = graded("grad_norm", "", 11, 0.999999, 8.7e-7, 0.14, 0, 0, "twin");
  norm.detail = "squared norm by family, layout / baseline: every family matches (the total is added wrong)";
  rep.rows = {norm, graded("grad", "router", 11, 1.006, 1.66e-2, 4.3e-3, 0.2, 0.3, "twin")};
  RootCause root = find_root(rep);
  EXPECT_EQ(rep.rows[root.row].subject, "router");
  EXPECT_EQ(root.factor.rfind("at rounding level: 3.9x the bound at most", 0), 0u) << root.factor;
  rep.rows[0].norm_rel = 1.0;  // the total itself 7x over its bound: not a family's echo
  EXPECT_FALSE(find_root(rep).rounding) << find_root(rep).factor;
  rep.rows[0].norm_rel = 8.7e-7, rep.rows[0].detail = "replicas differ";  // failed by something else
  EXPECT_FALSE(find_root(rep).rounding) << find_root(rep).factor;
  rep.rows[0].detail = norm.detail;
  rep.rows[1].norm_rel = 1.1 * 4.3e-3, rep.rows[1].far = 0.58, rep.rows[1].far_bound = 0.293;
  rep.rows[1].worst.ref = 1e-3, rep.rows[1].worst.got = 1.2e-3;  // an element moved 20%: no bf16 rounding
  EXPECT_EQ(find_root(rep).factor.rfind("at rounding level: 2.0x", 0), 0u) << find_root(rep).factor;
  rep.precision = "bf16";  // outside fp8 most elements far beyond the twins' fraction is no rounding level
  EXPECT_FALSE(find_root(rep).rounding) << find_root(rep).factor;
  rep.precision = "fp8", rep.rows[1].far = 0.6, rep.rows[1].far_bound = 0.1;  // 6x the twins' far: not rounding
  EXPECT_FALSE(find_root(rep).rounding) << find_root(rep).factor;
}

// Issue 41: the first failing row in data-flow order names the root unless it fails by less than
// kTwinFactor (10) times its bound and another row fails at the same step by more: then the row
// furthest over its bound does (not a parameter row: those follow from the step's gradients).
TEST(VerdictRoot, ARowFarOverItsBoundNamesTheRootOverAWeakEcho) {
  auto graded = [](const std::string& q, const std::string& sub, int64_t step, double scale, double err,
                   double tol) {
    Row r = row(q, sub, step, scale);
    r.norm_rel = err, r.tol = tol, r.bound_from = "floor";
    return r;
  };
  VerdictReport rep;
  rep.degrees = named_factors({{"ep", 2}, {"dp", 4}, {"world", 8}}, 1);
  rep.rows = {graded("loss", "", 0, 1.00002, 9.8e-6, 1e-6), graded("grad", "router", 0, 2.48, 2.3, 2e-3),
              graded("grad", "attention", 0, 1.0009, 7.6e-3, 1e-3), graded("param", "router", 0, 0.59, 0.12, 1e-4)};
  RootCause root = find_root(rep);
  EXPECT_EQ(rep.rows[root.row].quantity + " " + rep.rows[root.row].subject, "grad router");  // 1150x, not 9.8x
  EXPECT_EQ(root.same_step.size(), 3u);  // the loss among them
  rep.rows[0].norm_rel = 1.1e-5;  // the loss 11x over: it fails clearly and stays the root
  root = find_root(rep);
  EXPECT_EQ(rep.rows[root.row].quantity, "loss");
  rep.rows[0].norm_rel = 9.8e-6, rep.rows[1].step = rep.rows[2].step = 1;  // the strong rows a step later
  root = find_root(rep);
  EXPECT_EQ(rep.rows[root.row].quantity, "loss");  // a parameter row (1200x) never takes the root
  rep.rows[1].step = 0, rep.rows[1].norm_rel = 5e-3;  // 2.5x: nothing at the step fails by 10x
  root = find_root(rep);
  EXPECT_EQ(rep.rows[root.row].quantity, "loss");
}

// Issue 48: a first gradient row that reads as rounded to bf16 while the trace puts the first divergence
// in the forward pass yields to a gradient row at its step kTwinFactor times further over its bound
// (qk_norm_after_rope under fp8: grad head 8.3x normwise with 68% of its elements far, grad layernorm
// 210x). Without a forward divergence, or without a row that much stronger, the first row stays.
TEST(VerdictRoot, AForwardDivergenceOverridesAGradientReadAsRounding) {
  auto graded = [](const std::string& sub, double err, double tol, double far, double got, double ref) {
    Row r = row("grad", sub, 0, 1.00003);
    r.norm_rel = err, r.tol = tol, r.bound_from = "floor", r.far = far, r.far_bound = 0.05;
    r.worst.got = got, r.worst.ref = ref;
    return r;
  };
  VerdictReport rep;
  rep.precision = "fp8";
  rep.degrees = named_factors({{"tp", 2}, {"world", 2}}, 1);
  rep.rows = {graded("head", 2.0e-3, 2.4e-4, 0.68, -0.0325, -0.0327),
              graded("layernorm", 6.1e-2, 2.9e-4, 0.88, -1.7e-4, 4.8e-4)};
  ASSERT_NE(find_root(rep).factor.find("rounded to bf16"), std::string::npos) << find_root(rep).factor;
  EXPECT_EQ(rep.rows[find_root(rep).row].subject, "head");  // no trace: the backward order
  rep.trace_root = "layer 1 q, backward, micro-batch 0, rank 0 (tp 0)";
  EXPECT_EQ(rep.rows[find_root(rep).row].subject, "head");  // it enters in the backward: the order stands
  rep.trace_root = "layer 0 q, forward, micro-batch 0, rank 0 (tp 0)";
  RootCause root = find_root(rep);
  EXPECT_EQ(rep.rows[root.row].subject, "layernorm");
  EXPECT_EQ(root.factor.find("rounded to bf16"), std::string::npos) << root.factor;
  EXPECT_EQ(root.same_step.size(), 1u);  // the head among the rows failing at the step
  rep.rows[1].norm_rel = 1.0e-2;  // 34x: not 10x the head's 13.6x
  EXPECT_EQ(rep.rows[find_root(rep).row].subject, "head");
}

// A parameter row whose update is off by the step's clip coefficient names it.
TEST(VerdictRoot, NamesTheClipCoefficient) {
  VerdictReport rep;
  rep.degrees = named_factors({{"tp", 4}, {"ep", 2}, {"etp", 2}, {"world", 4}}, 1);
  Row r = row("param", "routed_experts", 0, 2.708618);
  rep.rows = {r};
  StepLine line;
  line.step = 0, line.clip_ref = 1 / 2.7086;
  rep.step_lines = {line};
  EXPECT_EQ(find_root(rep).factor.rfind("1/clip_coef (2.709): this family's gradients left out", 0), 0u)
      << find_root(rep).factor;
  rep.rows[0].scale_ratio = 1 / 2.7086;
  EXPECT_EQ(find_root(rep).factor.rfind("clip_coef (0.3692): this family's gradients clipped twice", 0), 0u)
      << find_root(rep).factor;
  rep.step_lines[0].clip_ref = 1;  // no clipping at that step: a plain unclean factor
  EXPECT_EQ(find_root(rep).factor, "not a clean factor");
}

TEST(VerdictRoot, NothingFailedNoRoot) {
  VerdictReport rep;
  rep.rows = {row("loss", "", 0, 1.0, RowVerdict::ok), row("routing", "layer 1", 1, NAN, RowVerdict::near_tie)};
  EXPECT_FALSE(find_root(rep).found);
  EXPECT_EQ(root_line(rep, find_root(rep)), "");
}

TEST(VerdictRoot, DataFlowOrder) {
  EXPECT_LT(data_flow_rank("loss", ""), data_flow_rank("grad", "head"));
  EXPECT_LT(data_flow_rank("grad", "head"), data_flow_rank("grad", "embedding"));
  EXPECT_LT(data_flow_rank("grad", "embedding"), data_flow_rank("grad_norm", ""));
  EXPECT_LT(data_flow_rank("grad_norm", ""), data_flow_rank("routing", "layer 1"));
  EXPECT_LT(data_flow_rank("expert_bias", ""), data_flow_rank("param", "head"));
}

}  // namespace
}  // namespace parity::verdict_root_test

namespace parity::verdict_root_test {
namespace {

// Tensor by tensor (verdict_flow.h): two gradient families failing at one step are ordered by
// their first wrong tensor in the backward pass, so an attention-backward bug (layer 1's wk,
// and the LayerNorm upstream of it, ln1) names attention; without a tensor the family order
// stands (LayerNorm before attention).
TEST(VerdictRoot, GradientRowsAreOrderedByTheirFirstWrongTensor) {
  EXPECT_EQ(verdict_flow::backward_position("lm_head.weight", 2), 0);
  EXPECT_EQ(verdict_flow::backward_position("final_ln.weight", 2), 1);
  EXPECT_LT(verdict_flow::backward_position("layers.1.moe.experts.w2", 2),
            verdict_flow::backward_position("layers.1.ln2.weight", 2));
  EXPECT_LT(verdict_flow::backward_position("layers.1.ln2.weight", 2),
            verdict_flow::backward_position("layers.1.attn.wk", 2));
  EXPECT_LT(verdict_flow::backward_position("layers.1.attn.wk", 2),
            verdict_flow::backward_position("layers.1.ln1.bias", 2));
  EXPECT_LT(verdict_flow::backward_position("layers.1.ln1.bias", 2),
            verdict_flow::backward_position("layers.0.mlp.w1", 2));
  EXPECT_EQ(verdict_flow::backward_position("embed.weight", 2), 10);
  EXPECT_EQ(verdict_flow::backward_position("layers.7.attn.wq", 2), -1);
  VerdictReport rep;
  Row ln = row("grad", "layernorm", 0, 1.01), attn = row("grad", "attention", 0, 0.98);
  rep.rows = {ln, attn};
  EXPECT_EQ(rep.rows[find_root(rep).row].subject, "layernorm");  // no tensor known: the family order
  rep.rows[0].flow = verdict_flow::backward_position("layers.1.ln1.weight", 2);
  rep.rows[1].flow = verdict_flow::backward_position("layers.1.attn.wk", 2),
  rep.rows[1].flow_tensor = "layers.1.attn.wk";
  const RootCause root = find_root(rep);
  EXPECT_EQ(rep.rows[root.row].subject, "attention");
  EXPECT_NE(root_line(rep, root).find("(first wrong in the backward pass: layers.1.attn.wk)"), std::string::npos);
}

// A sum over cp dropped or doubled reads as cp.
TEST(VerdictRoot, NamesTheContextParallelDegree) {
  const LayoutDegrees d = named_factors({{"cp", 2}}, 1);
  EXPECT_EQ(factor_meaning(0.5, d).rfind("1/2 (= 1/cp)", 0), 0u) << factor_meaning(0.5, d);
}

// The factors are the degree table's (mesh/layout_config.h): every factor word of it is named,
// a layout's dp is dp_replicate x dp_shard, and a tie is worded in the table's factor order,
// the micro-batches between world and pp (the reports' words do not move).
TEST(VerdictRoot, TheFactorsAreTheDegreeTables) {
  for (const std::string_view w : factor_words()) {
    const std::string word(w);
    EXPECT_EQ(factor_meaning(3.0, named_factors({{word, 3}}, 1)).rfind("3 (= " + word + ")", 0), 0u) << word;
  }
  LayoutConfig l;
  l.world = 16, l.dp_replicate = 2, l.dp_shard = 2, l.tp = 2, l.ep = 2, l.etp = 2, l.cp = 1, l.pp = 2;
  const LayoutDegrees d = layout_factors(l, 2);
  std::vector<std::string> words;
  for (const auto& [name, v] : d.factors) words.push_back(name + "=" + std::to_string(v));
  EXPECT_EQ(words, (std::vector<std::string>{"tp=2", "ep=2", "etp=2", "dp=4", "cp=1", "world=16", "microbatches=2",
                                             "pp=2"}));
  EXPECT_EQ(d.of("dp"), 4);
  EXPECT_EQ(d.of("no such degree"), 1);
  EXPECT_EQ(factor_meaning(2.0, d).rfind("2 (= tp) or 2 (= ep) or 2 (= etp) or 2 (= microbatches) or 2 (= pp)", 0), 0u)
      << factor_meaning(2.0, d);
}

// The dense parameters' DP group holds the cp ranks: a factor of dp x cp names it (the zoo at
// scale: dp_averaged_twice with dp 2 x cp 2 and 4 micro-batches read "1/4 (= 1/microbatches)").
TEST(VerdictRoot, NamesTheDenseDataParallelGroupUnderContextParallel) {
  LayoutDegrees d = named_factors({{"dp", 2}, {"cp", 2}}, 4);
  EXPECT_EQ(factor_meaning(0.25, d).rfind("1/4 (= 1/dense_dp) or 1/4 (= 1/microbatches)", 0), 0u)
      << factor_meaning(0.25, d);
  d = named_factors({{"dp", 1}, {"cp", 2}}, 4);  // the group is cp's alone: named once, as cp
  EXPECT_EQ(factor_meaning(0.5, d).find("dense_dp"), std::string::npos) << factor_meaning(0.5, d);
}

}  // namespace
}  // namespace parity::verdict_root_test
