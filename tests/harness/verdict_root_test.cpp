// verdict_root.h: the earliest failing step, the first failing quantity in data-flow order
// at that step, and the clean factor its scale ratio names.
#include "harness/verdict_root.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "harness/verdict.h"

namespace parity {
namespace {

Row row(const std::string& q, const std::string& subject, int64_t step, double scale, RowVerdict v = RowVerdict::fail) {
  Row r;
  r.quantity = q, r.subject = subject, r.step = step, r.scale_ratio = scale, r.verdict = v;
  return r;
}

TEST(VerdictRoot, EarliestStepThenDataFlowOrder) {
  VerdictReport rep;
  rep.degrees = {2, 2, 1, 4, 8};
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

TEST(VerdictRoot, NamesCleanFactorsByTheLayoutsDegrees) {
  const LayoutDegrees d{4, 2, 1, 2, 8};
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
}  // namespace parity
