// compute_copy.h: each gathered compute copy against the one-device copy, bit for bit (issue 41), on
// hand-made records; verdict_copies.h's piece of a global tensor; the root that names the row.
#include "harness/verdict/compute_copy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "harness/runner/verdict_copies.h"
#include "harness/verdict/verdict.h"
#include "harness/verdict/verdict_root.h"

namespace parity::compute_copy_test {  // one namespace per file: the tests build as unity batches
namespace {

using compute_copy::CopyLocal;

const Precision kFp16{DType::f32, Low::fp16, Low::none, false, false};
const Precision kFp8{DType::f32, Low::bf16, Low::none, true, false};

// A (4, 3) parameter's master and its one-device fp16 copy; a rank's piece: rows 1..2 (flat 3..8).
struct Piece {
  std::vector<float> master, ref;
  std::vector<int64_t> global;
  Piece() {
    for (int64_t i = 3; i < 9; ++i) {
      const float m = 0.01f * static_cast<float>(i) + 1e-5f;  // not an fp16 value
      master.push_back(m), ref.push_back(round_fp16(m)), global.push_back(i);
    }
  }
};

std::vector<compute_copy::ParamInfo> params() {
  return {{"embed.weight", {4, 3}, false}, {"lm_head.weight", {3, 4}, false}};
}

// Every rank's part: one CopyLocal per parameter.
std::vector<double> part(const std::vector<CopyLocal>& per_param) {
  std::vector<double> out;
  for (const CopyLocal& c : per_param) c.pack(out);
  return out;
}

TEST(VerdictComputeCopy, TravelsAsDoubles) {
  CopyLocal c;
  c.masters_equal = 0, c.gathered = 1, c.compared = 6, c.differing = 2, c.flat = 7, c.got = 0.5, c.ref = 0.25;
  c.master = 0.375;
  std::vector<double> out;
  c.pack(out);
  ASSERT_EQ(out.size(), CopyLocal::kWidth);
  const CopyLocal d = CopyLocal::unpack(out.data());
  EXPECT_EQ(d.masters_equal, 0);
  EXPECT_EQ(d.flat, 7);
  EXPECT_EQ(d.got, 0.5);
  EXPECT_EQ(d.ref, 0.25);
  EXPECT_EQ(d.master, 0.375);
}

TEST(VerdictComputeCopy, EqualCopiesPass) {
  const Piece p;
  const CopyLocal c = compute_copy::compare(p.ref.data(), p.ref.data(), p.master.data(), 6, p.global);
  EXPECT_EQ(c.compared, 6);
  EXPECT_EQ(c.differing, 0);
  EXPECT_EQ(c.flat, -1);
  const std::vector<double> r0 = part({c, c}), r1 = part({c, CopyLocal{}});  // rank 1 gathered no head
  const verdict_detail::Outcome o = compute_copy::outcome({r0.data(), r1.data()}, params(), kFp16, DType::f32);
  EXPECT_EQ(o.verdict, RowVerdict::ok);
  EXPECT_EQ(o.compared, 18);
  EXPECT_EQ(o.norm_rel, 0);
  EXPECT_EQ(o.detail, "");
}

// One element one fp32 ulp off the one-device copy fails the row, named: the parameter, the element's
// global index, the rank, both values and the master's.
TEST(VerdictComputeCopy, OneElementOneUlpOffFailsAndIsNamed) {
  const Piece p;
  std::vector<float> got = p.ref;
  got[4] = std::nextafter(got[4], 1.0f);  // flat 7: [2, 1]
  const CopyLocal ok = compute_copy::compare(p.ref.data(), p.ref.data(), p.master.data(), 6, p.global);
  const CopyLocal bad = compute_copy::compare(got.data(), p.ref.data(), p.master.data(), 6, p.global);
  EXPECT_EQ(bad.differing, 1);
  EXPECT_EQ(bad.flat, 7);
  EXPECT_EQ(bad.got, static_cast<double>(got[4]));
  EXPECT_EQ(bad.ref, static_cast<double>(p.ref[4]));
  const std::vector<double> r0 = part({ok, ok}), r1 = part({ok, bad});
  const verdict_detail::Outcome o = compute_copy::outcome({r0.data(), r1.data()}, params(), kFp16, DType::f32);
  EXPECT_EQ(o.verdict, RowVerdict::fail);
  EXPECT_EQ(o.compared, 24);
  EXPECT_DOUBLE_EQ(o.norm_rel, 1.0 / 24);
  EXPECT_EQ(o.worst.name, "lm_head.weight");
  EXPECT_EQ(o.worst.rank, 1);
  EXPECT_EQ(o.worst.index, (Shape{1, 3}));  // flat 7 of (3, 4)
  EXPECT_NE(o.detail.find("compute copy differs from the one-device copy: lm_head.weight (1 of 2 parameters, 1 of "
                          "24 elements); first: lm_head.weight[1, 3] on rank 1"),
            std::string::npos)
      << o.detail;
  // an fp32 ulp off an fp16 value is no rounding of its master
  EXPECT_NE(o.detail.find("a value no rounding of its master gives"), std::string::npos) << o.detail;
}

// The zoo's outer_compute_copy_unrounded: the copy is the master itself.
TEST(VerdictComputeCopy, AnUnroundedCopyReadsAsTheMastersDtype) {
  const Piece p;
  const CopyLocal bad = compute_copy::compare(p.master.data(), p.ref.data(), p.master.data(), 6, p.global);
  EXPECT_EQ(bad.differing, 6);
  const std::vector<double> r0 = part({bad, CopyLocal{}});
  const verdict_detail::Outcome o = compute_copy::outcome({r0.data()}, params(), kFp16, DType::f32);
  EXPECT_EQ(o.verdict, RowVerdict::fail);
  EXPECT_NE(o.detail.find("first: embed.weight[1, 0] on rank 0"), std::string::npos) << o.detail;
  EXPECT_NE(o.detail.find("fp32 where fp16 is required (the master's value, not rounded)"), std::string::npos)
      << o.detail;
  const double m = p.master[0];
  const compute_copy::ParamInfo emb{"embed.weight", {4, 3}, false}, wq{"layers.0.attn.wq", {4, 4}, true};
  EXPECT_EQ(compute_copy::reading(round_bf16(m), round_fp16(m), m, emb, kFp16, DType::f32),
            "bf16 where fp16 is required");
  EXPECT_EQ(compute_copy::reading(round_bf16(m), 0.5 * m, m, wq, kFp8, DType::f32),
            "bf16 where E4M3 (from bf16) is required (rounded, not quantized)");
}

// Where a rank's masters are not the baseline's before the step (a resumed phase, the trajectory
// verdict after step 0), the parameter is not compared on any rank, and the row says so.
TEST(VerdictComputeCopy, MastersThatDifferAreNotCompared) {
  const Piece p;
  const CopyLocal bad = compute_copy::compare(p.master.data(), p.ref.data(), p.master.data(), 6, p.global);
  CopyLocal drifted;
  drifted.masters_equal = 0;
  const std::vector<double> r0 = part({bad, bad}), r1 = part({drifted, CopyLocal{}});
  const verdict_detail::Outcome o = compute_copy::outcome({r0.data(), r1.data()}, params(), kFp16, DType::f32);
  EXPECT_EQ(o.verdict, RowVerdict::fail);  // the head's premise holds: compared, and it differs
  EXPECT_NE(o.detail.find(": lm_head.weight (1 of 2"), std::string::npos) << o.detail;
  EXPECT_NE(o.detail.find("1 of 2 parameters not compared"), std::string::npos) << o.detail;
  const std::vector<double> r2 = part({drifted, drifted});
  const verdict_detail::Outcome none = compute_copy::outcome({r0.data(), r2.data()}, params(), kFp16, DType::f32);
  EXPECT_EQ(none.verdict, RowVerdict::ok);
  EXPECT_EQ(none.compared, 0);
}

// A rank's model-parallel-local piece of a global tensor, row-major: rows 1..2, columns 2..3 of (4, 5).
TEST(VerdictComputeCopy, APieceIsABoxOfTheGlobalTensor) {
  EXPECT_EQ(verdict_copies::box_indices({4, 5}, {2, 2}, {1, 2}), (std::vector<int64_t>{7, 8, 12, 13}));
  EXPECT_EQ(verdict_copies::box_indices({2, 2, 3}, {1, 2, 3}, {1, 0, 0}),
            (std::vector<int64_t>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(verdict_copies::box_indices({3}, {0}, {3}), (std::vector<int64_t>{}));
}

// The root: a failing compute_copy row comes before the loss and the gradients it moves, and its
// detail is the root's reading.
TEST(VerdictComputeCopy, TheRootNamesTheComputeCopy) {
  VerdictReport rep;
  Row head, copy;
  head.quantity = "grad", head.subject = "head", head.step = 0, head.verdict = RowVerdict::fail;
  head.tol = 1e-4, head.norm_rel = 1e-3, head.bound_from = "twin";
  copy.quantity = "compute_copy", copy.subject = "every gathered copy", copy.step = 0, copy.bound_from = "exact";
  copy.scale_ratio = NAN, copy.verdict = RowVerdict::fail;
  copy.detail = "compute copy differs from the one-device copy: embed.weight (...): fp32 where fp16 is required";
  rep.rows = {head, copy};
  const RootCause root = find_root(rep);
  ASSERT_TRUE(root.found);
  EXPECT_EQ(rep.rows[root.row].quantity, "compute_copy");
  EXPECT_EQ(root.factor, copy.detail);
  EXPECT_LT(data_flow_rank("compute_copy", ""), data_flow_rank("loss", ""));
  const std::string line = root_line(rep, root);
  EXPECT_NE(line.find("root: compute_copy every gathered copy at step 0, scale - -> compute copy differs"),
            std::string::npos)
      << line;
}

}  // namespace
}  // namespace parity::compute_copy_test
