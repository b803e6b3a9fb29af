// Precision policies (core/precision.h): bf16 rounding, the policy names, the storage points.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/precision.h"
#include "thrown.h"

namespace parity {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Literal cases, written from the bf16 format (1 sign, 8 exponent, 7 stored mantissa bits):
// the value keeps its top 16 bits, rounded to nearest with ties to even.
TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_bf16(-2.5f), -2.5f);                      // representable
  EXPECT_EQ(bits(round_bf16(from_bits(0x3f808000u))), 0x3f800000u);  // tie, even below: down
  EXPECT_EQ(bits(round_bf16(from_bits(0x3f818000u))), 0x3f820000u);  // tie, odd below: up
  EXPECT_EQ(bits(round_bf16(from_bits(0x3f808001u))), 0x3f810000u);  // above the tie: up
  EXPECT_EQ(bits(round_bf16(from_bits(0x3f807fffu))), 0x3f800000u);  // below the tie: down
  EXPECT_EQ(round_bf16(1.0f + 0x1p-9f), 1.0f);                // below half an ulp (2^-8): down
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f), 1.0f);                // the tie, 1 is even: down
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f + 0x1p-9f), 1.0f + 0x1p-7f);  // beyond the tie: up
  EXPECT_EQ(bits(round_bf16(-0.0f)), 0x80000000u);           // the sign of zero stays
  EXPECT_EQ(bits(round_bf16(from_bits(0x00000001u))), 0u);   // the smallest subnormal rounds to 0
}

TEST(Bf16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(round_bf16(inf), inf);
  EXPECT_EQ(round_bf16(-inf), -inf);
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_bf16(from_bits(0x7f800001u))));  // a NaN whose payload is all below bit 16
  EXPECT_EQ(round_bf16(std::numeric_limits<float>::max()), inf);  // beyond bf16's largest finite: overflows
  EXPECT_EQ(bits(round_bf16(from_bits(0x7f7f7fffu))), 0x7f7f0000u);  // bf16's largest finite stays finite
}

TEST(Bf16, EveryResultIsABf16AndWithinHalfAnUlp) {
  uint64_t k = 12345;
  for (int i = 0; i < 100000; ++i) {
    k = k * 6364136223846793005ull + 1442695040888963407ull;
    const float x = from_bits((static_cast<uint32_t>(k >> 32) & 0x7effffffu) | 0x00800000u);  // normal, positive
    const float y = round_bf16(x);
    ASSERT_EQ(bits(y) & 0xffffu, 0u) << x;
    ASSERT_LE(std::fabs(static_cast<double>(y) - x), std::ldexp(1.0, std::ilogb(x) - 8) * 1.0000001) << x;
  }
}

// Literal cases, written from the binary16 format (1 sign, 5 exponent, 10 stored mantissa bits,
// bias 15): the largest finite 65504, the smallest normal 2^-14, the smallest subnormal 2^-24.
TEST(Fp16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(round_fp16(1.0f), 1.0f);
  EXPECT_EQ(round_fp16(-2.5f), -2.5f);                                // representable
  EXPECT_EQ(round_fp16(1.0f + 0x1p-11f), 1.0f);                       // the tie, 1 is even: down
  EXPECT_EQ(round_fp16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);          // the tie, odd below: up
  EXPECT_EQ(round_fp16(1.0f + 0x1p-11f + 0x1p-20f), 1.0f + 0x1p-10f);  // above the tie: up
  EXPECT_EQ(round_fp16(1.0f + 0x1p-11f - 0x1p-20f), 1.0f);             // below the tie: down
  EXPECT_EQ(round_fp16(0.1f), 0.0999755859375f);                      // 0x2e66
  EXPECT_EQ(round_fp16(1.0f / 3), 0.333251953125f);                    // 0x3555
  EXPECT_EQ(round_fp16(3.14159265f), 3.140625f);                       // 0x4248
  EXPECT_EQ(round_fp16(2049.0f), 2048.0f);                             // ulp 2 from 2048: a tie, down to even
  EXPECT_EQ(round_fp16(2051.0f), 2052.0f);                             // a tie, up to even
  EXPECT_EQ(bits(round_fp16(-0.0f)), 0x80000000u);                     // the sign of zero stays
}

TEST(Fp16, OverflowsToInfinityFromTheTieAbove65504) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(round_fp16(65504.0f), 65504.0f);  // the largest finite fp16
  EXPECT_EQ(round_fp16(65519.99f), 65504.0f);
  EXPECT_EQ(round_fp16(65520.0f), inf);  // the tie between 65504 (odd mantissa) and 2^16: up, to infinity
  EXPECT_EQ(round_fp16(-65520.0f), -inf);
  EXPECT_EQ(round_fp16(1e6f), inf);
  EXPECT_EQ(round_fp16(std::numeric_limits<float>::max()), inf);
  EXPECT_EQ(round_fp16(inf), inf);
  EXPECT_EQ(round_fp16(-inf), -inf);
  EXPECT_TRUE(std::isnan(round_fp16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Fp16, SubnormalsHaveAQuantumOf2ToTheMinus24) {
  EXPECT_EQ(round_fp16(0x1p-14f), 0x1p-14f);                      // the smallest normal
  EXPECT_EQ(round_fp16(0x1p-14f - 0x1p-24f), 0x1p-14f - 0x1p-24f);  // the largest subnormal
  EXPECT_EQ(round_fp16(0x1p-24f), 0x1p-24f);                      // the smallest subnormal
  EXPECT_EQ(round_fp16(0x1p-25f), 0.0f);                          // the tie with 0: to 0 (even)
  EXPECT_EQ(round_fp16(0x1p-25f + 0x1p-40f), 0x1p-24f);           // above the tie: up
  EXPECT_EQ(round_fp16(3 * 0x1p-25f), 0x1p-23f);                  // the tie, 2^-24 odd: up to 2 x 2^-24
  EXPECT_EQ(round_fp16(5 * 0x1p-25f), 0x1p-23f);                  // the tie of 2 and 3 x 2^-24: to 2 (even)
  EXPECT_EQ(round_fp16(1e-8f), 0.0f);                             // flushed by rounding, not by a rule
  EXPECT_EQ(bits(round_fp16(-1e-9f)), 0x80000000u);               // rounds to -0
  EXPECT_EQ(round_fp16(1.5e-5f), 0x1p-24f * 252);                 // 1.5e-5 / 2^-24 = 251.66
}

// Every result is an fp16 (11 significant bits, or a multiple of 2^-24) within half its quantum,
// on draws over fp16's whole range.
TEST(Fp16, EveryResultIsAnFp16AndWithinHalfItsQuantum) {
  uint64_t k = 6789;
  for (int i = 0; i < 100000; ++i) {
    k = k * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(k >> 11) * 0x1p-53;  // [0, 1)
    const auto x = static_cast<float>(std::ldexp(1.0 + u, static_cast<int>((k >> 3) % 42) - 26));  // 2^-26 .. 2^16
    const float y = round_fp16(x);
    if (x >= 65520.0f) {
      ASSERT_TRUE(std::isinf(y)) << x;
      continue;
    }
    const double q = std::ldexp(1.0, std::max(std::ilogb(x) - 10, -24));
    ASSERT_EQ(std::fmod(static_cast<double>(y), q), 0.0) << x;
    ASSERT_LE(std::fabs(static_cast<double>(y) - x), q / 2) << x;
  }
}

TEST(Precision, NamesRoundTripAndBadNamesAreRefused) {
  for (const char* n : {"fp64", "fp32", "bf16", "bf16-reduce-bf16", "fp16", "fp8", "fp8-delayed"})
    EXPECT_EQ(precision_name(parse_precision(n, "$.precision")), n);
  const Precision b = parse_precision("bf16", "$.precision");
  EXPECT_EQ(b.compute, DType::f32);
  EXPECT_EQ(b.store, Low::bf16);
  EXPECT_EQ(b.reduce, Low::none);
  const Precision h = parse_precision("fp16", "$.precision");
  EXPECT_EQ(h.compute, DType::f32);
  EXPECT_EQ(h.store, Low::fp16);
  EXPECT_EQ(h.reduce, Low::none);
  EXPECT_TRUE(scales_loss(h));
  EXPECT_FALSE(scales_loss(b));
  EXPECT_EQ(unit_roundoff(h), 0x1p-11);
  const std::string bad = testing::config_error([] { (void)parse_precision("bfloat", "--precision"); });
  const Precision d = parse_precision("fp8-delayed", "$.precision");  // fp8's points, scales from a history
  EXPECT_TRUE(d.fp8 && d.fp8_delayed);
  EXPECT_FALSE(parse_precision("fp8", "$.precision").fp8_delayed);
  EXPECT_EQ(d.store, Low::bf16);
  EXPECT_NE(bad.find("--precision: must be fp64, fp32, bf16, bf16-reduce-bf16, fp16, fp8 or fp8-delayed, got "
                     "\"bfloat\""),
            std::string::npos)
      << bad;
  EXPECT_EQ(unit_roundoff(b), 0x1p-8);
  EXPECT_EQ(unit_roundoff(parse_precision("fp64", "")), 0x1p-53);
}

TEST(Precision, StoragePointsRoundOnlyUnderABf16Policy) {
  std::vector<float> x{1.0f + 0x1p-20f, 3.14159265f};
  const std::vector<float> orig = x;
  to_storage(x.data(), 2);  // no policy on this thread: nothing happens
  EXPECT_EQ(x, orig);
  {
    const PrecisionScope s(parse_precision("bf16", ""));
    to_storage(x.data(), 2);
    EXPECT_EQ(x[0], 1.0f);
    EXPECT_EQ(x[1], round_bf16(orig[1]));
    EXPECT_NE(x[1], orig[1]);
  }
  EXPECT_EQ(current_precision().store, Low::none);  // the scope restored the thread's policy
  std::vector<float> h{1.0f + 0x1p-20f, 3.14159265f, 70000.0f};
  {
    const PrecisionScope s(parse_precision("fp16", ""));
    to_storage(h.data(), 3);
    EXPECT_EQ(h, (std::vector<float>{1.0f, 3.140625f, std::numeric_limits<float>::infinity()}));
  }
  std::vector<float> g{3.14159265f};
  {
    const PrecisionScope s(parse_precision("bf16", ""));
    to_grad_storage(g.data(), 1);  // bf16 keeps gradients in fp32: no backward storage point
    EXPECT_EQ(g[0], 3.14159265f);
  }
  {
    const PrecisionScope s(parse_precision("fp16", ""));
    to_grad_storage(g.data(), 1);
    EXPECT_EQ(g[0], 3.140625f);
  }
  std::vector<double> d{1.0 + 0x1p-20};
  {
    const PrecisionScope s(parse_precision("fp64", ""));
    to_storage(d.data(), 1);
  }
  EXPECT_EQ(d[0], 1.0 + 0x1p-20);
}

// A parameter's compute copy rounds to the format its plan entry names (parallel/param_plan.h), not
// the thread's policy: the explicit format wins both ways.
TEST(Precision, AStoragePointGivenItsFormatIgnoresThePolicy) {
  const std::vector<float> orig{1.0f + 0x1p-20f, 3.14159265f};
  std::vector<float> x = orig;
  to_storage(Low::bf16, x.data(), 2);  // no policy on this thread, bf16 named
  EXPECT_EQ(x, (std::vector<float>{1.0f, round_bf16(orig[1])}));
  x = orig;
  {
    const PrecisionScope s(parse_precision("bf16", ""));
    to_storage(Low::none, x.data(), 2);  // a bf16 policy, the format none: kept
    EXPECT_EQ(x, orig);
    to_storage(Low::fp16, x.data(), 2);
    EXPECT_EQ(x, (std::vector<float>{1.0f, 3.140625f}));
  }
}

// The twin's jitter is one fixed sequence (reproducible runs) and moves values before they
// are rounded: a value just below a rounding boundary crosses it in about half the cases.
TEST(Precision, JitterIsReproducibleAndFlipsValuesNearABoundary) {
  auto run = [] {
    std::vector<float> x(4000, from_bits(0x3f807fffu));  // 1 ulp of fp32 below a bf16 tie
    const PrecisionScope s(parse_precision("bf16", ""));
    const JitterScope j;
    to_storage(x.data(), static_cast<int64_t>(x.size()));
    return x;
  };
  const std::vector<float> a = run(), b = run();
  EXPECT_EQ(a, b);
  int up = 0;
  for (float v : a) up += v != 1.0f;
  EXPECT_GT(up, 1000);
  EXPECT_LT(up, 3000);
  EXPECT_FALSE(jitter_on());
}

// The loss's gradient where no policy stores it (bf16 and the fp8 policies): under the twin every value
// moves by kLossGradJitterUlps of fp32 (2: one or two fp32 ulps), with a sequence of its own, so the storage
// points' signs are those of a twin without it; fp16 (which stores it, jittered at to_grad_storage), fp32 and
// a run outside the twin keep it (issue 41, core/precision.h jitter_loss_gradient).
TEST(Precision, TheTwinMovesTheLossGradientWhereNoPolicyStoresIt) {
  const std::vector<float> orig(4000, 1.0f);
  const std::vector<float> near(64, from_bits(0x3f807fffu));  // 1 ulp of fp32 below a bf16 tie
  auto run = [&](const char* policy, bool twin, bool loss) {
    std::vector<float> x = orig, y = near;
    const PrecisionScope s(parse_precision(policy, ""));
    std::optional<JitterScope> j;
    if (twin) j.emplace();
    if (loss) jitter_loss_gradient(x.data(), static_cast<int64_t>(x.size()));
    to_storage(y.data(), static_cast<int64_t>(y.size()));
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  const std::vector<float> a = run("bf16", true, true);
  EXPECT_EQ(a, run("bf16", true, true));  // one fixed sequence
  int up = 0, down = 0;
  for (size_t i = 0; i < orig.size(); ++i) {
    const double d = static_cast<double>(a[i]) - 1.0;  // 1 +- 2^-23, both exact in fp32
    up += d == 0x1p-23, down += d == -0x1p-23;
  }
  EXPECT_EQ(up + down, static_cast<int>(orig.size()));
  EXPECT_GT(up, 1500);
  EXPECT_GT(down, 1500);
  // the storage points' signs untouched: the same as a twin that never moved the loss's gradient
  EXPECT_TRUE(std::equal(a.begin() + 4000, a.end(), run("bf16", true, false).begin() + 4000));
  const std::vector<float> f8 = run("fp8-delayed", true, true);
  EXPECT_EQ(std::vector<float>(f8.begin(), f8.begin() + 4000), std::vector<float>(a.begin(), a.begin() + 4000));
  for (const char* kept : {"fp16", "fp32"}) {
    const std::vector<float> k = run(kept, true, true);
    EXPECT_TRUE(std::equal(orig.begin(), orig.end(), k.begin())) << kept;
  }
  const std::vector<float> outside = run("bf16", false, true);
  EXPECT_TRUE(std::equal(orig.begin(), orig.end(), outside.begin()));
  EXPECT_FALSE(jitter_on());
}

}  // namespace
}  // namespace parity
