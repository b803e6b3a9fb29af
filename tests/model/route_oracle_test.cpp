// Near-tie arbitration (model/route_oracle.h): a choice that differs within the noise follows
// the baseline's, one that differs by more is kept.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "model/route_oracle.h"

namespace parity {
namespace {

TEST(RouteOracle, NearTiesFollowTheBaselineWiderGapsAreKept) {
  // 3 tokens, E = 3, K = 1; the baseline chose expert 0 for each.
  const std::vector<std::vector<int64_t>> chosen{{0, 0, 0}};
  const std::vector<std::vector<double>> scores{{0.50, 0.4999999, 0.1,    // token 0: 0 vs 1 within 1e-6
                                                 0.50, 0.30, 0.2,         // token 1: 0 vs 1, gap 0.2
                                                 0.40, 0.40, 0.2}};       // token 2: exact tie
  const RouteOracle o{&chosen, &scores, 0, 1e-6, false};
  std::vector<int64_t> mine{1, 1, 1};  // this run chose expert 1 everywhere
  const int64_t ids[3] = {0, 1, 2};
  EXPECT_EQ(follow_baseline_routes(RouteFollow{&o, 0, 0}, ids, 3, 1, 3, mine.data()), 2);
  EXPECT_EQ(mine, (std::vector<int64_t>{0, 1, 0}));  // token 1's gap is a real difference: kept

  std::vector<int64_t> ordered{1, 1, 1};  // consecutive ids from `first`, the relative rule
  const RouteOracle rel{&chosen, &scores, 1e-3, 0, false};
  EXPECT_EQ(follow_baseline_routes(RouteFollow{&rel, 0, 0}, nullptr, 3, 1, 3, ordered.data()), 2);
  EXPECT_EQ(ordered, (std::vector<int64_t>{0, 1, 0}));

  std::vector<int64_t> twin{1, 1, 1};  // the twin follows whatever the gap
  const RouteOracle always{&chosen, &scores, 0, 0, true};
  EXPECT_EQ(follow_baseline_routes(RouteFollow{&always, 0, 0}, nullptr, 3, 1, 3, twin.data()), 3);
  EXPECT_EQ(twin, (std::vector<int64_t>{0, 0, 0}));

  std::vector<int64_t> same{0, 0, 0}, none{1, 1, 1};
  EXPECT_EQ(follow_baseline_routes(RouteFollow{&always, 0, 0}, nullptr, 3, 1, 3, same.data()), 0);
  EXPECT_EQ(follow_baseline_routes(RouteFollow{}, nullptr, 3, 1, 3, none.data()), 0);  // no oracle
  EXPECT_EQ(none, (std::vector<int64_t>{1, 1, 1}));
}

}  // namespace
}  // namespace parity
