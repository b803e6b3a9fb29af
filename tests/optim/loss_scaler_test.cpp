// fp16's dynamic loss scaler (optim/loss_scaler.h): GradScaler's update rule and its unscale.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "optim/loss_scaler.h"

namespace parity::loss_scaler_test {
namespace {

TEST(LossScaler, DefaultsAreGradScalers) {
  const LossScaleConfig c;
  EXPECT_EQ(c.init_scale, 65536.0);
  EXPECT_EQ(c.growth_interval, 2000);
  EXPECT_EQ(c.backoff_factor, 0.5);
  EXPECT_EQ(c.growth_factor, 2.0);
  EXPECT_EQ(LossScaler(c).scale, 65536.0);
}

TEST(LossScaler, BacksOffOnEverySkipAndGrowsAfterAnIntervalWithout) {
  LossScaler s(LossScaleConfig{.init_scale = 0x1p24, .growth_interval = 3});
  s.update(true);
  EXPECT_EQ(s.scale, 0x1p23);
  s.update(true);
  EXPECT_EQ(s.scale, 0x1p22);
  s.update(false), s.update(false);
  EXPECT_EQ(s.scale, 0x1p22);  // two steps without a skip: not yet
  EXPECT_EQ(s.growth_tracker, 2);
  s.update(true);  // a skip resets the count
  EXPECT_EQ(s.scale, 0x1p21);
  EXPECT_EQ(s.growth_tracker, 0);
  s.update(false), s.update(false), s.update(false);
  EXPECT_EQ(s.scale, 0x1p22);  // the third in a row grows it
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(LossScaler, AGrowthThatWouldOverflowFp32IsNotTaken) {
  LossScaler s(LossScaleConfig{.init_scale = 0x1p127, .growth_interval = 1});
  s.update(false);
  EXPECT_EQ(s.scale, 0x1p127);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(LossScaler, UnscaleMultipliesByTheInverseAndFindsInfAndNan) {
  std::vector<Tensor<float>> g;
  g.emplace_back(Shape{3}, std::vector<float>{1024.0f, -3.0f, 0.5f});
  EXPECT_FALSE(unscale_grads(g, 1024.0));
  EXPECT_EQ(g[0].data[0], 1.0f);
  EXPECT_EQ(g[0].data[1], -3.0f / 1024);
  g[0].data[2] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(unscale_grads(g, 2.0));
  g[0].data[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(unscale_grads(g, 2.0));
}

}  // namespace
}  // namespace parity::loss_scaler_test
