// verdict_signature.h on hand-made records: each classic signature named where its pattern is,
// and not where the pattern is broken (one family off, an even split, a clip_coef that moved).
#include "harness/verdict/verdict_signature.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "harness/verdict/verdict.h"

namespace parity::verdict_signature_test {  // one namespace per file: the tests build as unity batches
namespace {

Row row(const std::string& q, const std::string& subject, double scale) {
  Row r;
  r.quantity = q, r.subject = subject, r.step = 0, r.scale_ratio = scale, r.verdict = RowVerdict::fail;
  r.tol = 1e-11;
  return r;
}

VerdictReport report(std::vector<Row> rows, std::vector<int64_t> ranks) {
  VerdictReport rep;
  rep.command = "compare";
  const auto dp = static_cast<int64_t>(ranks.size());
  rep.degrees = named_factors({{"dp", dp}, {"world", dp}}, 1);
  rep.degrees.batch = 0;
  for (int64_t n : ranks) rep.degrees.batch += n;
  rep.degrees.rank_sequences = std::move(ranks);
  rep.rows = std::move(rows);
  StepLine line;
  line.clip_coef = 1, line.clip_ref = 0.52;
  rep.step_lines = {line};
  return rep;
}

std::string meaning(const VerdictReport& r) { return find_root(r).factor; }

TEST(VerdictSignature, ARanksOwnShareOfAnUnevenBatch) {
  EXPECT_EQ(meaning(report({row("tokens_per_expert", "all MoE layers", 0.6)}, {3, 2})).rfind(
                "0.6 = dp rank 0's share of the batch (3 of 5 sequences): that rank's own counts", 0),
            0u);
  EXPECT_EQ(meaning(report({row("tokens_per_expert", "all MoE layers", 0.5)}, {2, 2})).find("share"),
            std::string::npos);  // an even split: 1/dp says it already
  EXPECT_EQ(meaning(report({row("tokens_per_expert", "all MoE layers", 0.6)}, {})), "not a clean factor");
  VerdictReport run = report({row("tokens_per_expert", "all MoE layers", 0.6)}, {3, 2});
  run.command = "run";  // parity's own layouts keep their words
  EXPECT_EQ(meaning(run), "not a clean factor");
}

TEST(VerdictSignature, EveryFamilyShrunkWithClipCoefOneIsClippingBeforeTheSync) {
  const auto grads = [](double last) {
    return std::vector<Row>{row("grad", "head", 0.36), row("grad", "attention", 0.34), row("grad", "router", last)};
  };
  EXPECT_NE(meaning(report(grads(0.38), {3, 2})).find("the gradients clipped before the sync"), std::string::npos);
  EXPECT_EQ(meaning(report(grads(0.9), {3, 2})).find("before the sync"), std::string::npos);  // not uniform
  VerdictReport moved = report(grads(0.38), {3, 2});
  moved.step_lines[0].clip_coef = 0.52;  // the candidate clipped after all
  EXPECT_EQ(meaning(moved).find("before the sync"), std::string::npos);
}

TEST(VerdictSignature, EveryFamilyAtOneOverDpIsAveragedTwice) {
  VerdictReport r = report({row("grad", "head", 0.25), row("grad", "attention", 0.25)}, {2, 2, 2, 2});
  r.step_lines[0].clip_ref = 1;
  EXPECT_NE(meaning(r).find("1/4 (= 1/dp) or 1/4 (= 1/world): every gradient family at this scale: the gradients "
                            "averaged over the dp ranks twice"),
            std::string::npos)
      << meaning(r);
  r.step_lines[0].clip_ref = 0.35;  // the reference clips, the candidate's norm is now under the clip
  EXPECT_NE(meaning(r).find("averaged over the dp ranks twice"), std::string::npos) << meaning(r);
  r.rows.push_back(row("grad", "router", 0.5));  // one family off: not the pattern
  EXPECT_EQ(meaning(r).find("twice"), std::string::npos);
}

TEST(VerdictSignature, ALossWhosePartsAreEachRanksMean) {
  VerdictReport r = report({row("loss", "all micro-batches", 0.999)}, {3, 2});
  r.degrees.own_mean_ratio = {0.5};  // parts x their sequences / (B x loss) = 1 / (2 ranks x 1 micro-batch)
  EXPECT_NE(meaning(r).find("each rank's loss part is the mean over its own sequences"), std::string::npos);
  r.degrees.own_mean_ratio = {0.5004};
  EXPECT_EQ(meaning(r).find("own sequences"), std::string::npos);
}

}  // namespace
}  // namespace parity::verdict_signature_test
