// Precision policies (core/precision.h): bf16 rounding, the policy names, the storage points.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

TEST(Precision, NamesRoundTripAndBadNamesAreRefused) {
  for (const char* n : {"fp64", "fp32", "bf16", "bf16-reduce-bf16"})
    EXPECT_EQ(precision_name(parse_precision(n, "$.precision")), n);
  const Precision b = parse_precision("bf16", "$.precision");
  EXPECT_EQ(b.compute, DType::f32);
  EXPECT_EQ(b.store, Low::bf16);
  EXPECT_EQ(b.reduce, Low::none);
  const std::string fp16 = testing::config_error([] { (void)parse_precision("fp16", "$.precision"); });
  EXPECT_NE(fp16.find("$.precision: fp16 needs dynamic loss scaling"), std::string::npos) << fp16;
  const std::string bad = testing::config_error([] { (void)parse_precision("bfloat", "--precision"); });
  EXPECT_NE(bad.find("--precision: must be fp64, fp32, bf16 or bf16-reduce-bf16, got \"bfloat\""), std::string::npos)
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
  std::vector<double> d{1.0 + 0x1p-20};
  {
    const PrecisionScope s(parse_precision("fp64", ""));
    to_storage(d.data(), 1);
  }
  EXPECT_EQ(d[0], 1.0 + 0x1p-20);
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

}  // namespace
}  // namespace parity
