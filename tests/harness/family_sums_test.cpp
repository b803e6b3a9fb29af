// family_sums.h: the baseline's per-family sums that `parity run`'s ranks and `parity compare`
// both read (the grad_norm row's families, is_far's magnitude floors), one implementation.
#include "harness/verdict/family_sums.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "harness/verdict/tolerance.h"
#include "model/params.h"

namespace parity::family_sums_test {  // one namespace per file: the tests build as unity batches
namespace {

using family_sums::GroupSquares;
using family_sums::StepSums;
using family_sums::step_sums;

TEST(FamilySums, AGroupsFloorIsItsRmsAGradientsAtLeastItsShareOfTheModels) {
  GroupSquares s(3);
  s.add_tensor(0, 8.0, 2.0);    // rms 2
  s.add_tensor(1, 1e-12, 1.0);  // rms 1e-6: far below the model's
  // group 2: nothing added
  const double model = std::sqrt((8.0 + 1e-12) / 3.0);
  EXPECT_DOUBLE_EQ(s.rms(0), 2.0);
  EXPECT_DOUBLE_EQ(s.rms(1), 1e-6);
  EXPECT_EQ(s.rms(2), 0.0);
  EXPECT_DOUBLE_EQ(s.model_rms(), model);
  EXPECT_DOUBLE_EQ(s.floor(0, true), 2.0);
  EXPECT_DOUBLE_EQ(s.floor(1, true), kDeadGradient * model);
  EXPECT_DOUBLE_EQ(s.floor(2, true), kDeadGradient * model);
  EXPECT_DOUBLE_EQ(s.floor(1, false), 1e-6);  // parameters: their own family alone
  EXPECT_EQ(s.floor(2, false), 0.0);
}

// Issue 41 (bf16 drawn1399): the model's gradient fell 2000x by step 4 (5.2e-2 -> 2.4e-5 rms) and a dead
// family's far elements were measured against that step's scale while its row's floor took the largest so
// far: 83% far. A step's is_far magnitude for a dead family is the model's largest scale so far, as its floor's.
TEST(FamilySums, ADeadFamilysFloorHoldsTheModelsLargestScaleSoFar) {
  double peak = 0;
  GroupSquares early(2);
  early.add_tensor(0, 400.0, 4.0);   // the live family: rms 10
  early.add_tensor(1, 4e-16, 4.0);   // dead: rms 1e-8
  early.hold_model_peak(peak);
  EXPECT_DOUBLE_EQ(peak, 400.0 + 4e-16);
  GroupSquares late(2);             // the model converged: its gradient 1e4 times smaller
  late.add_tensor(0, 4e-6, 4.0);
  late.add_tensor(1, 4e-16, 4.0);
  const double step_model = late.model_rms();
  late.hold_model_peak(peak);
  EXPECT_DOUBLE_EQ(peak, 400.0 + 4e-16) << "the peak stays the largest";
  EXPECT_DOUBLE_EQ(late.model_rms(), std::sqrt(peak / 8.0));
  EXPECT_GT(late.floor(1, true), 1e3 * kDeadGradient * step_model);
  EXPECT_DOUBLE_EQ(late.floor(1, true), kDeadGradient * std::sqrt(peak / 8.0));
  EXPECT_DOUBLE_EQ(late.floor(0, false), 1e-3) << "parameters and live families: their own rms";
  double fresh = 0;
  GroupSquares bad(1);
  bad.add_tensor(0, INFINITY, 1.0);  // an fp16 step that overflowed does not become the scale
  bad.hold_model_peak(fresh);
  EXPECT_EQ(fresh, 0.0);
}

TEST(FamilySums, ElementsAddUpInTheirGroupAloneNotTheModels) {
  GroupSquares s(2);
  s.add_element(1, 3.0), s.add_element(1, -4.0);
  EXPECT_DOUBLE_EQ(s.sq(1), 25.0);
  EXPECT_DOUBLE_EQ(s.rms(1), std::sqrt(12.5));
  EXPECT_EQ(s.sq(0), 0.0);
  EXPECT_EQ(s.model_rms(), 0.0);
}

// The ranks' bits: each family's sum adds its tensors' sums in parameter order. 1e16 then 1 and 1
// is 1e16 (each 1 is half an ulp, rounded to even); the other order, 1 + 1 first, is 1e16 + 2.
TEST(FamilySums, AFamilyAddsItsTensorsInParameterOrder) {
  const std::vector<ParamSpec> specs = {{"a", {1}, Family::router},
                                        {"b", {1}, Family::head},
                                        {"c", {1}, Family::router},
                                        {"d", {1}, Family::router}};
  const std::vector<double> f = family_sums::per_family(specs, {1e16, 5.0, 1.0, 1.0});
  ASSERT_EQ(f.size(), kFamilyCount);
  EXPECT_EQ(f[static_cast<size_t>(Family::router)], 1e16);
  EXPECT_EQ(f[static_cast<size_t>(Family::head)], 5.0);
  EXPECT_EQ(f[static_cast<size_t>(Family::embedding)], 0.0);
  GroupSquares s(1);
  for (double q : {1e16, 1.0, 1.0}) s.add_tensor(0, q, 1.0);
  EXPECT_EQ(s.sq(0), 1e16);
}

// StepSums (issue 43): the sums the ranks used to form inline, in the order they formed them
// (parameter by parameter, element by element, into each group's running sum): the shared
// baseline's producer forms them once per host now, and they must be the same bits.
TEST(FamilySums, AStepsSumsAreTheRanksRunningSumsInParameterOrder) {
  const std::vector<size_t> group_of{0, 1, 0};
  std::vector<Tensor<double>> grad, before, after;
  for (int p = 0; p < 3; ++p) {
    Buffer<double> g, b, a;
    for (int j = 0; j < 5 + p; ++j)
      g.push_back(std::sin(1.0 + p * 7 + j) * std::pow(10.0, -j)), b.push_back(std::cos(2.0 + j * p)),
          a.push_back(b.back() - 1e-3 * std::sin(3.0 * j + p));
    grad.emplace_back(Shape{static_cast<int64_t>(g.size())}, std::move(g));
    before.emplace_back(Shape{static_cast<int64_t>(b.size())}, std::move(b));
    after.emplace_back(Shape{static_cast<int64_t>(a.size())}, std::move(a));
  }
  const double clip = 0.7, wd = 0.01;
  const StepSums s = step_sums(grad, before, after, clip, wd, group_of, 2);
  std::vector<double> taken(2, 0.0), upd(2, 0.0), n(2, 0.0);
  for (size_t p = 0; p < 3; ++p) {
    EXPECT_EQ(s.grad_sq[p], sum_of_squares(grad[p].ptr(), grad[p].numel()));
    EXPECT_EQ(s.param_sq[p], sum_of_squares(after[p].ptr(), after[p].numel()));
    for (int64_t j = 0; j < grad[p].numel(); ++j) {
      const double r = clip * grad[p].ptr()[j] + wd * before[p].ptr()[j], u = after[p].ptr()[j] - before[p].ptr()[j];
      taken[group_of[p]] += r * r, upd[group_of[p]] += u * u, n[group_of[p]] += 1;
    }
  }
  EXPECT_EQ(s.taken_sq, taken);
  EXPECT_EQ(s.update_sq, upd);
  EXPECT_EQ(s.n, (std::vector<double>{12, 6}));
  EXPECT_EQ(s.n, n);
  EXPECT_TRUE(s.fits(clip, wd, group_of));
  EXPECT_FALSE(s.fits(1.0, wd, group_of));  // another step's clip: a rank forms its own
  EXPECT_FALSE(s.fits(clip, wd, {0, 0, 0}));
}

}  // namespace
}  // namespace parity::family_sums_test
