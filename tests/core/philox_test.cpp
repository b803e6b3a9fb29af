#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"

namespace parity {
namespace {

// Known-answer vectors of Philox4x32-10 published with Random123 (kat_vectors).
TEST(Philox, MatchesPublishedKnownAnswers) {
  EXPECT_EQ(philox(0, 0, 0), (PhiloxWords{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  PhiloxWords w = philox(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull);
  EXPECT_EQ(w, (PhiloxWords{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, UniformIsInsideTheOpenInterval) {
  EXPECT_GT(uniform_open(0, 0), 0.0);
  EXPECT_LT(uniform_open(0xffffffffu, 0xffffffffu), 1.0);
}

TEST(Philox, NormalHasUnitMomentsAndDistinctStreams) {
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    double z = philox_normal(42, "layers.0.attn.wq", static_cast<uint64_t>(i));
    s += z, s2 += z * z;
  }
  // 5 standard errors: mean se 1/sqrt(n), variance se sqrt(2/n)
  EXPECT_NEAR(s / n, 0.0, 5.0 / std::sqrt(n));
  EXPECT_NEAR(s2 / n, 1.0, 5.0 * std::sqrt(2.0 / n));
  EXPECT_NE(philox_normal(42, "layers.0.attn.wq", 7), philox_normal(42, "layers.0.attn.wk", 7));
  EXPECT_NE(philox_normal(42, "x", 7), philox_normal(43, "x", 7));
  EXPECT_EQ(philox_normal(42, "x", 7), philox_normal(42, "x", 7));
}

}  // namespace
}  // namespace parity
