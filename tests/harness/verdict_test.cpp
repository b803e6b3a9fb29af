// The verdict's parts in one process: the counted-copy rule, faults, per-group sums over
// ranks, routing decisions with their score gaps and near-ties, rows, the table. The
// verdict through real ranks is tested by tests/scenarios.cmake (every scenario, injected
// faults, refused layouts).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "harness/verdict/verdict.h"
#include "harness/verdict/verdict_detail.h"
#include "mesh/param_layout.h"

namespace parity::verdict_test {  // one namespace per file: the tests build as unity batches
namespace {

namespace vd = verdict_detail;

LayoutConfig layout(int64_t dpr, int64_t dps, int64_t tp) {
  LayoutConfig l;
  l.dp_replicate = dpr, l.dp_shard = dps, l.tp = tp, l.etp = tp, l.world = dpr * dps * tp;
  return l;
}

// Every element of every parameter is counted by exactly one rank, for layouts with
// replicas on every dense dimension (HSDP replicas, TP-replicated LayerNorms and router).
TEST(VerdictCountedCopy, EveryElementOfEveryParameterIsCountedOnce) {
  ModelConfig c;
  c.heads = 4, c.shared_experts = 1;
  for (auto l : {layout(1, 1, 1), layout(2, 1, 1), layout(1, 3, 1), layout(2, 2, 2), layout(1, 3, 2),
                 layout(2, 1, 4), layout(1, 8, 1)}) {
    const mesh::Mesh m(l);
    for (const ParamSpec& spec : param_specs(c)) {
      const mesh::TensorLayout pl = mesh::param_layout(m, spec);
      std::vector<int> hits(static_cast<size_t>(numel(spec.shape)), 0);
      for (int r = 0; r < m.world(); ++r)
        if (counted_copy(m, pl, r))
          for (int64_t g : mesh::global_indices(m, pl, spec.shape, r)) hits[static_cast<size_t>(g)] += 1;
      for (size_t g = 0; g < hits.size(); ++g)
        ASSERT_EQ(hits[g], 1) << spec.name << " element " << g << " under " << mesh::layout_str(pl) << " world "
                              << m.world();
    }
  }
}

TEST(VerdictCountedCopy, ReplicateAndPartialDimensionsCountCoordinateZeroOnly) {
  const mesh::Mesh m(layout(2, 2, 2));  // dense (dpr, dps, cp 1, tp), rank = tp + 2 (dps + 2 dpr)
  const mesh::TensorLayout all_rep = mesh::replicated(mesh::View::dense);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(counted_copy(m, all_rep, r), r == 0) << r;
  mesh::TensorLayout partial_tp{mesh::View::dense,
                          {mesh::Placement::replicate(), mesh::Placement::shard(0), mesh::Placement::replicate(),
                           mesh::Placement::partial()}};
  std::vector<int> counted;
  for (int r = 0; r < 8; ++r)
    if (counted_copy(m, partial_tp, r)) counted.push_back(r);
  EXPECT_EQ(counted, (std::vector<int>{0, 2}));  // dpr 0, tp 0, both dp_shard coordinates
}

TEST(VerdictFault, ParsesTargetFamilyAndFactor) {
  Fault f = parse_fault("scale_grad:router:2");
  EXPECT_EQ(f.target, Fault::Target::grad);
  EXPECT_EQ(f.family, Family::router);
  EXPECT_EQ(f.factor, 2.0);
  f = parse_fault("scale_param:routed_experts:0.5");
  EXPECT_EQ(f.target, Fault::Target::param);
  EXPECT_EQ(f.family, Family::routed_experts);
  EXPECT_EQ(f.factor, 0.5);
  EXPECT_EQ(f.rank, -1);
  f = parse_fault("scale_param:router:1.0000000001@3");  // one rank's copy only
  EXPECT_EQ(f.factor, 1.0000000001);
  EXPECT_EQ(f.rank, 3);
  for (const char* bad : {"", "scale_grad", "scale_grad:router", "scale_grad:router:", "scale_grad:rooter:2",
                          "shift_grad:router:2", "scale_grad:router:2x", "scale_grad:router:1e999",
                          "scale_grad:router:infinity", "scale_grad:router:NaN", "scale_grad:router:2@",
                          "scale_grad:router:2@-1", "scale_grad:router:2@x"})
    EXPECT_THROW(parse_fault(bad), ConfigError) << bad;
  // non-finite only when spelled so: a layout that goes non-finite (issue 26)
  EXPECT_TRUE(std::isnan(parse_fault("scale_grad:router:nan").factor));
  EXPECT_EQ(parse_fault("scale_param:head:-inf").factor, -std::numeric_limits<double>::infinity());
}

vd::GroupSpec spec_2x3(double tol) {
  vd::GroupSpec g;
  g.quantity = "grad", g.subject = "router", g.tol = Tolerance{tol, tol * 1000};
  g.names = {"a", "b"};
  g.shapes = {{2, 3}, {4}};
  return g;
}
// One tensor "a" of n elements (and an empty "b" before it when `second`): a group whose
// every element a test adds.
vd::GroupSpec spec_n(double tol, int64_t n, bool second = false) {
  vd::GroupSpec g = spec_2x3(tol);
  g.shapes = second ? std::vector<Shape>{{0}, {n}} : std::vector<Shape>{{n}, {0}};
  return g;
}

// Two ranks, each holding half of tensor "a" (3 elements): a doubled reduction on both.
// The grad norm's family check (verdict_detail.h family_norm_off): a family whose baseline gradient
// is exactly zero (its bound inf or finite) does not fail the norm on its own (its own row judges
// it); a family off its finite bound still does.
TEST(VerdictFamilyNorm, AFamilyWithoutABoundDoesNotFailTheNorm) {
  const std::vector<Family> groups = {Family::head, Family::router};
  std::vector<double> ref(kFamilyCount, 0.0), got(kFamilyCount, 0.0);
  ref[static_cast<size_t>(Family::head)] = got[static_cast<size_t>(Family::head)] = 4.0;
  got[static_cast<size_t>(Family::router)] = 1e-38;  // the baseline's router gradient is exactly zero
  std::vector<Bound> grad(2);
  grad[0].value = 1e-10, grad[1].value = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(vd::family_norm_off(ref, got.data(), groups, grad));
  grad[1].value = 1e-10;  // a finite bound: a family at zero in the baseline is its own row's to judge
  EXPECT_FALSE(vd::family_norm_off(ref, got.data(), groups, grad));
  ref[static_cast<size_t>(Family::router)] = 1e-38;  // a router with a gradient, its layout's x 2: off
  got[static_cast<size_t>(Family::router)] = 4e-38;
  EXPECT_TRUE(vd::family_norm_off(ref, got.data(), groups, grad));
  ref[static_cast<size_t>(Family::router)] = got[static_cast<size_t>(Family::router)] = 0;
  got[static_cast<size_t>(Family::head)] = 4.0 * (1 + 1e-6);  // the head off its bound: off either way
  grad[1].value = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(vd::family_norm_off(ref, got.data(), groups, grad));
}

TEST(VerdictGroups, ADoubledGradientFailsWithScaleRatioTwoAndNamesTheWorstElement) {
  std::vector<vd::LocalSums> parts(2);
  const double ref[6] = {1, -2, 3, 0.5, 4, -1};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i) parts[r].add(0, r * 3 + i, 2 * ref[r * 3 + i], ref[r * 3 + i], true);
  vd::Outcome o = vd::group_outcome(spec_2x3(1e-11), vd::combine(parts));
  EXPECT_EQ(o.verdict, RowVerdict::fail);
  EXPECT_DOUBLE_EQ(o.scale_ratio, 2.0);
  EXPECT_DOUBLE_EQ(o.norm_rel, 1.0);
  EXPECT_EQ(o.worst.name, "a");
  EXPECT_EQ(o.worst.index, (Shape{1, 1}));  // flat 4: the |4| element on rank 1
  EXPECT_EQ(o.worst.rank, 1);
  EXPECT_DOUBLE_EQ(o.worst.abs_err, 4.0);
}

TEST(VerdictGroups, PackedSumsRoundTripThroughDoubles) {
  vd::LocalSums s;
  s.add(1, 3, 1.5, 1.25, true);
  s.add(1, 2, 2.0, 2.0, false);
  s.shape_bad = 1;
  std::vector<double> buf;
  s.pack(buf);
  ASSERT_EQ(buf.size(), vd::LocalSums::kWidth);
  vd::LocalSums u = vd::LocalSums::unpack(buf.data());
  EXPECT_EQ(u.once.diff2, s.once.diff2);
  EXPECT_EQ(u.all.ref2, s.all.ref2);
  EXPECT_EQ(u.max_err, 0.25);
  EXPECT_EQ(u.flat, 3);
  EXPECT_EQ(u.shape_bad, 1);
  EXPECT_EQ(u.sum_got, 1.5);  // counted elements only
  EXPECT_EQ(u.sum_ref, 1.25);
}

// Under a 16-bit reduction policy the grad rows compare each reduction's exact result and count what
// the roundings may move (kReduceRounding x the sum of its |partials|) into allow2, which the grad norm's
// bound takes (verdict_part.cpp add_tensors): the counted elements' allowances travel with the sums
// and add over ranks. The replicas row reads the bits a rank holds (`held`), not the compared value:
// two ranks holding the same exact reduction but different rounded bits are replicas apart.
TEST(VerdictGroups, AReductionsAllowanceTravelsWithTheSumsAndTheHeldBitsKeyTheReplicas) {
  const double ref = 1.0, moved = 1.0 + 0x1p-7;  // one bf16 ulp: far by kFarRel alone
  std::vector<vd::LocalSums> parts(2);
  parts[0].add(0, 0, moved, ref, true, 0.0);
  parts[0].allow2 += 0.25;
  parts[1].add(0, 2, 1.1, ref, true, 0.0);
  parts[1].allow2 += kReduceRounding * kReduceRounding;
  std::vector<double> buf;
  parts[1].pack(buf);
  ASSERT_EQ(buf.size(), vd::LocalSums::kWidth);
  EXPECT_EQ(vd::LocalSums::unpack(buf.data()).allow2, kReduceRounding * kReduceRounding);
  const vd::GroupStep g = vd::combine(parts);
  EXPECT_EQ(g.allow2, 0.25 + kReduceRounding * kReduceRounding);
  EXPECT_EQ(g.far, 2.0);
  const double held_a = 1.0, held_b = 1.0 + 0x1p-7;
  std::vector<vd::LocalSums> same(2), apart(2);
  same[0].add(1, 0, 1.0, 1.0, true, 0.0, &held_a);
  same[1].add(1, 0, 1.0, 1.0, false, 0.0, &held_a);
  apart[0].add(1, 0, 1.0, 1.0, true, 0.0, &held_a);
  apart[1].add(1, 0, 1.0, 1.0, false, 0.0, &held_b);  // the same compared value, other bits held
  EXPECT_LT(vd::combine(same).replica_a, 0);
  EXPECT_EQ(vd::combine(apart).replica_a, 0);
  EXPECT_EQ(vd::combine(apart).replica_b, 1);
}

// A tensor's digests at once (LocalSums::add_digests, the path add_tensors takes): the key is its index set's
// (index_key), the bits are its values' in order, in eight lanes. Two ranks holding the same values at the same
// indices agree; one bit of any element (in a full group of eight or in the tail), two elements swapped across
// lanes or within one, or another index set, tell them apart.
TEST(VerdictGroups, ATensorsDigestsTellEveryBitPlaceAndIndexApart) {
  std::vector<double> x(21);
  std::vector<int64_t> idx(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.25 * static_cast<double>(i) - 1.0, idx[i] = 3 * static_cast<int64_t>(i);
  auto digests = [](const std::vector<double>& v, const std::vector<int64_t>& ix) {
    vd::LocalSums s;
    s.add_digests(vd::index_key(4, ix.data(), ix.size()), v.size(), [&v](size_t i) { return v[i]; });
    return std::pair{s.key, s.bits};
  };
  const auto base = digests(x, idx);
  EXPECT_EQ(digests(x, idx), base);
  for (size_t at : {size_t{0}, size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{20}}) {
    std::vector<double> y = x;
    y[at] = std::nextafter(y[at], 10.0);
    EXPECT_EQ(digests(y, idx).first, base.first) << at;
    EXPECT_NE(digests(y, idx).second, base.second) << "one ulp at " << at;
  }
  for (auto [a, b] : {std::pair{1, 2}, std::pair{1, 9}, std::pair{17, 18}}) {
    std::vector<double> y = x;
    std::swap(y[static_cast<size_t>(a)], y[static_cast<size_t>(b)]);
    EXPECT_NE(digests(y, idx).second, base.second) << a << " and " << b << " swapped";
  }
  std::vector<int64_t> other = idx;
  other.back() += 1;
  EXPECT_NE(digests(x, other).first, base.first);
  EXPECT_NE(vd::index_key(5, idx.data(), idx.size()), vd::index_key(4, idx.data(), idx.size()));  // another tensor
}

// The second measure (tolerance.h is_far): every element moved by a bf16 rounding's amount
// (2^-9 relative) stays within a loose normwise bound but fails on its far elements, once
// there are enough of them; the same moves on a handful of elements say nothing.
TEST(VerdictGroups, ManyFarElementsFailWithinTheNormwiseBound) {
  auto run = [](int n) {
    std::vector<vd::LocalSums> parts(1);
    for (int i = 0; i < n; ++i) {  // a rounding moves elements by different amounts, either way
      const double ref = 1.0 + 0.01 * i;
      parts[0].add(0, i, ref * (1 + (i % 2 ? 0x1p-9 : -0x1p-9) * (1 + 0.1 * (i % 3))), ref, true, 1.0);
    }
    vd::GroupSpec g = spec_n(1e-2, n);  // normwise 2^-9 = 2e-3: within
    g.far_bound = kFarFloor;
    return vd::group_outcome(g, vd::combine(parts));
  };
  const vd::Outcome many = run(64), few = run(8);
  EXPECT_LT(many.norm_rel, 1e-2);
  EXPECT_EQ(many.verdict, RowVerdict::fail);
  EXPECT_DOUBLE_EQ(many.far, 1.0);
  EXPECT_NE(many.detail.find("100.0% of the elements are far"), std::string::npos) << many.detail;
  EXPECT_EQ(few.verdict, RowVerdict::ok);  // 8 < kFarMinCount far elements
  EXPECT_FALSE(is_far(1.0 + 0x1p-12, 1.0, 1.0));  // rounding noise far below 2^-11 is near
  EXPECT_TRUE(is_far(1.0 + 0x1p-9, 1.0, 1.0));
}

// Issue 41: every element scaled by the same 2^-9 (one bf16 rounding of a value a whole tiny
// family flows through) is far element by element, but it is a uniform scale within the normwise
// bound, not a rounding of each element: the row passes, and the far fraction is still shown.
TEST(VerdictGroups, AUniformScaleWithinTheBoundIsNotFarElements) {
  std::vector<vd::LocalSums> parts(1);
  for (int i = 0; i < 64; ++i) parts[0].add(0, i, (1.0 + 0.01 * i) * (1 + 0x1p-9), 1.0 + 0.01 * i, true, 1.0);
  vd::GroupSpec g = spec_n(1e-2, 64);
  g.far_bound = kFarFloor;
  const vd::Outcome o = vd::group_outcome(g, vd::combine(parts));
  EXPECT_EQ(o.verdict, RowVerdict::ok) << o.detail;
  EXPECT_DOUBLE_EQ(o.far, 1.0);
  EXPECT_NEAR(o.scale_ratio, 1 + 0x1p-9, 1e-12);
  g.tol.norm_rel = 1e-3;  // the same scale over the normwise bound still fails
  EXPECT_EQ(vd::group_outcome(g, vd::combine(parts)).verdict, RowVerdict::fail);
}

TEST(VerdictGroups, AReplicaThatDisagreesFailsEvenWhenTheCountedCopyAgrees) {
  std::vector<vd::LocalSums> parts(2);
  parts[0].add(1, 0, 1.0, 1.0, true);   // the counted copy
  parts[1].add(1, 0, 1.5, 1.0, false);  // a replica that diverged
  vd::Outcome o = vd::group_outcome(spec_n(1e-11, 1, true), vd::combine(parts));
  EXPECT_EQ(o.norm_rel, 0.0);
  EXPECT_EQ(o.verdict, RowVerdict::fail);
  EXPECT_NE(o.detail.find("replicas disagree"), std::string::npos) << o.detail;
  EXPECT_EQ(o.worst.rank, 1);
  EXPECT_EQ(o.worst.name, "b");
}

TEST(VerdictGroups, NonFiniteValuesAndWrongSizesFail) {
  std::vector<vd::LocalSums> parts(1);
  parts[0].add(0, 0, NAN, 1.0, true);
  EXPECT_EQ(vd::group_outcome(spec_2x3(1), vd::combine(parts)).verdict, RowVerdict::fail);
  std::vector<vd::LocalSums> sized(1);
  sized[0].shape_bad = 1;
  EXPECT_EQ(vd::group_outcome(spec_2x3(1), vd::combine(sized)).verdict, RowVerdict::fail);
}

TEST(VerdictGroups, RoundingInsideTheBoundPasses) {
  std::vector<vd::LocalSums> parts(1);
  parts[0].add(0, 0, 1.0 + 1e-15, 1.0, true);
  vd::Outcome o = vd::group_outcome(spec_n(1e-11, 1), vd::combine(parts));
  EXPECT_EQ(o.verdict, RowVerdict::ok);
  EXPECT_NEAR(o.scale_ratio, 1.0, 1e-14);
  EXPECT_EQ(o.compared, 1);
}

// A row is never ok on what it did not see: every element of the group's tensors must be
// compared exactly once (a tensor skipped, a shard left out, or one counted by two replicas
// fails, even where every compared element matches).
TEST(VerdictGroups, ARowThatComparedTooFewOrTooManyElementsFails) {
  auto run = [](int n_added, int twice) {
    std::vector<vd::LocalSums> parts(2);
    for (int i = 0; i < n_added; ++i) parts[i % 2].add(0, i, 1.0, 1.0, true);
    for (int i = 0; i < twice; ++i) parts[1].add(0, i, 1.0, 1.0, true);
    return vd::group_outcome(spec_2x3(1e-11), vd::combine(parts));  // 6 + 4 elements
  };
  EXPECT_EQ(run(10, 0).verdict, RowVerdict::ok);
  for (auto [n, twice] : {std::pair{9, 0}, std::pair{0, 0}, std::pair{10, 1}}) {
    const vd::Outcome o = run(n, twice);
    EXPECT_EQ(o.verdict, RowVerdict::fail) << n << " + " << twice;
    EXPECT_NE(o.detail.find("compared " + std::to_string(n + twice) + " of 10 elements"), std::string::npos)
        << o.detail;
  }
}

// Replicas, bit for bit: ranks whose digests of the global indices they hold agree must hold
// the same bits; one ulp on one copy is within every normwise bound and still named.
TEST(VerdictGroups, CopiesOfTheSameElementsMustHoldTheSameBits) {
  auto run = [](double drift) {
    std::vector<vd::LocalSums> parts(3);
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 4; ++i) {
        const double x = 1.0 + i;
        parts[r].add(0, r == 2 ? 4 + i : i, r == 1 && i == 3 ? x * drift : x, x, r != 1);  // 0, 1 replicas; 2 apart
      }
    return vd::group_outcome(spec_n(1e-11, 8), vd::combine(parts));
  };
  const vd::Outcome same = run(1.0), drifted = run(1.0 + 0x1p-52);
  EXPECT_EQ(same.replica_a, -1);
  EXPECT_EQ(same.replica_pairs, 1);
  EXPECT_EQ(drifted.verdict, RowVerdict::ok);  // within the normwise bound...
  EXPECT_EQ(drifted.replica_a, 0);              // ...but not the same bits
  EXPECT_EQ(drifted.replica_b, 1);
  const vd::Outcome row = vd::replicas_outcome({"grad router on ranks 0 and 1"}, 1);
  EXPECT_EQ(row.verdict, RowVerdict::fail);
  EXPECT_NE(row.detail.find("differ in their bits: grad router on ranks 0 and 1"), std::string::npos) << row.detail;
  EXPECT_EQ(vd::replicas_outcome({}, 1).verdict, RowVerdict::ok);
}

// Two tokens, E = 4, K = 2. Baseline choices (descending s + bias).
struct Routes {
  std::vector<int64_t> base_chosen{0, 1, 2, 3};
  std::vector<double> scores{0.5, 0.3, 0.15, 0.05,  // token 0: clear gaps
                             0.1, 0.2, 0.35, 0.35 - 1e-13};  // token 1: experts 2 and 3 nearly tied
};

TEST(VerdictRouting, IdenticalDecisionsMatch) {
  Routes R;
  vd::RouteLocal l = vd::compare_routes({0, 1}, R.base_chosen, R.base_chosen, R.scores, 2, 4, 1e-8);
  EXPECT_EQ(l.mismatch, 0);
  EXPECT_EQ(l.bad_id, 0);
}

TEST(VerdictRouting, AClearlyDifferentDecisionFailsWithItsGap) {
  Routes R;
  vd::RouteLocal l = vd::compare_routes({0}, {0, 2}, R.base_chosen, R.scores, 2, 4, 1e-8);
  EXPECT_EQ(l.mismatch, 1);
  EXPECT_EQ(l.near_tie, 0);
  EXPECT_NEAR(l.gap, 0.15, 1e-15);  // 0.3 (expert 1) - 0.15 (expert 2)
  vd::Outcome o = vd::routing_outcome({l, vd::RouteLocal{}}, {1, 1}, "layers.1");
  EXPECT_EQ(o.verdict, RowVerdict::fail);
  EXPECT_EQ(o.worst.rank, 0);
  EXPECT_NE(o.detail.find("expert 2 instead of 1"), std::string::npos) << o.detail;
}

TEST(VerdictRouting, ADifferenceInsideTheRoundingBoundIsNamedNearTie) {
  Routes R;
  // rank 1 reports token 1 with the nearly tied experts swapped
  vd::RouteLocal l = vd::compare_routes({1}, {3, 2}, R.base_chosen, R.scores, 2, 4, 1e-8);
  EXPECT_EQ(l.mismatch, 1);
  EXPECT_EQ(l.near_tie, 1);
  vd::Outcome o = vd::routing_outcome({vd::RouteLocal{}, l}, {1, 1}, "layers.1");
  EXPECT_EQ(o.verdict, RowVerdict::near_tie);
  EXPECT_EQ(o.worst.rank, 1);
  EXPECT_NE(o.detail.find("1 near-tie"), std::string::npos) << o.detail;
  // ... and the same gap under a tighter bound is a failure
  EXPECT_EQ(vd::compare_routes({1}, {3, 2}, R.base_chosen, R.scores, 2, 4, 1e-15).near_tie, 0);
}

TEST(VerdictRouting, TokensReportedTwiceOrNeverOrOutOfRangeFail) {
  Routes R;
  EXPECT_EQ(vd::routing_outcome({vd::RouteLocal{}}, {1, 0}, "l").verdict, RowVerdict::fail);
  EXPECT_EQ(vd::routing_outcome({vd::RouteLocal{}}, {2, 1}, "l").verdict, RowVerdict::fail);
  vd::RouteLocal l = vd::compare_routes({7}, {0, 1}, R.base_chosen, R.scores, 2, 4, 1e-8);
  EXPECT_EQ(l.bad_id, 1);
  EXPECT_EQ(vd::routing_outcome({l}, {1, 1}, "l").verdict, RowVerdict::fail);
  EXPECT_EQ(vd::compare_routes({0}, {0}, R.base_chosen, R.scores, 2, 4, 1e-8).bad_id, 1);  // (n, K) size
}

TEST(VerdictRows, AFailingRowShowsItsFirstBadStepAndOkRowsTheirLargestError) {
  Row row;
  vd::Outcome ok1, ok2, bad1, bad2;
  ok1.norm_rel = 1e-16, ok2.norm_rel = 3e-16;
  bad1.norm_rel = 1, bad1.scale_ratio = 2, bad1.verdict = RowVerdict::fail;
  bad2.norm_rel = 5, bad2.scale_ratio = 7, bad2.verdict = RowVerdict::fail;
  vd::update_row(row, 0, ok1);
  vd::update_row(row, 1, ok2);
  EXPECT_EQ(row.step, 1);
  vd::update_row(row, 2, ok1);
  EXPECT_EQ(row.step, 1);
  vd::update_row(row, 3, bad1);
  vd::update_row(row, 4, bad2);
  vd::update_row(row, 5, ok1);
  EXPECT_EQ(row.verdict, RowVerdict::fail);
  EXPECT_EQ(row.step, 3);
  EXPECT_EQ(row.scale_ratio, 2);
  EXPECT_EQ(row.bad_steps, 2);
}

TEST(VerdictReportTable, FailingRowsComeFirstAndTheExitCodeIsTheVerdict) {
  VerdictReport r;
  r.scenario = "x", r.dtype = "fp64", r.backend = "gloo", r.layout = "world 2", r.world = 2, r.steps = 1;
  r.step_lines.push_back(StepLine{});
  Row bad;
  bad.quantity = "grad", bad.subject = "router", bad.norm_rel = 1, bad.scale_ratio = 2, bad.tol = 1e-11;
  bad.step = 0, bad.bad_steps = 1, bad.verdict = RowVerdict::fail;
  bad.worst = {"layers.1.moe.router.gate", {3, 1}, 1, 2.0, 1.0, 1.0};
  Row good;
  good.quantity = "loss", good.step = 0;
  r.rows = {bad, good};
  const std::string t = format_verdict(r);
  EXPECT_NE(t.find("FAIL     grad              router"), std::string::npos) << t;
  EXPECT_NE(t.find("2.000000"), std::string::npos) << t;
  EXPECT_NE(t.find("layers.1.moe.router.gate[3, 1] rank 1"), std::string::npos) << t;
  EXPECT_LT(t.find("FAIL     grad"), t.find("ok       loss")) << t;
  EXPECT_NE(t.find("verdict: FAIL: 1 of 2 rows"), std::string::npos) << t;
  EXPECT_NE(t.find("root: grad router at step 0, scale 2.000000 -> 2: doubled"), std::string::npos) << t;
  EXPECT_EQ(r.exit_code(), 1);
  const nlohmann::json j = verdict_json(r);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["root"]["quantity"], "grad");
  EXPECT_EQ(j["root"]["step"], 0);
  EXPECT_EQ(j["rows"][0]["subject"], "router");
  EXPECT_EQ(j["rows"][0]["worst"]["index"], (std::vector<int64_t>{3, 1}));
  r.rows = {good};
  EXPECT_EQ(r.exit_code(), 0);
}

// A row whose bound reached kLooseBound at some step is named beside the verdict, with its largest
// bound and that step (update_row keeps them): a PASS says what it could not see.
TEST(VerdictReportTable, ARowTooLooseToSeeAScaleIsNamed) {
  VerdictReport r;
  r.scenario = "x", r.dtype = "bf16", r.backend = "gloo", r.layout = "world 2", r.world = 2, r.steps = 3;
  r.step_lines.push_back(StepLine{});
  Row loose, tight;
  loose.quantity = "grad", loose.subject = "router";
  tight.quantity = "grad", tight.subject = "head";
  for (int64_t t = 0; t < 3; ++t) {
    vd::Outcome o;
    o.bound.value = t == 1 ? 1.25 : 0.01;
    vd::update_row(loose, t, o);
    o.bound.value = 0.01;
    vd::update_row(tight, t, o);
  }
  EXPECT_EQ(loose.loosest, 1.25);
  EXPECT_EQ(loose.loosest_step, 1);
  r.rows = {loose, tight};
  const std::string t = format_verdict(r);
  EXPECT_NE(t.find("loose rows (a bound of 0.5 or more"), std::string::npos) << t;
  EXPECT_NE(t.find("): grad router 1.2 at step 1\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("grad head 0.01"), std::string::npos) << t;
  EXPECT_EQ(verdict_json(r)["rows"][0]["loosest"], 1.25);
  r.rows = {tight};
  EXPECT_EQ(format_verdict(r).find("loose rows"), std::string::npos);
}

}  // namespace
}  // namespace parity::verdict_test
