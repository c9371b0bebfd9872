#include "parallel/optim/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tessera::parallel {
namespace {

TEST(LrScheduleTest, WarmupThenCosineToMinAtLastStep) {
  LrScheduleOptions o{.lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .steps = 14, .cosine = true};
  EXPECT_DOUBLE_EQ(LearningRate(o, 0), 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(o, 3), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 4), 1.0);               // Cosine starts at the peak.
  EXPECT_NEAR(LearningRate(o, 9), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 5 / 9)), 1e-12);
  EXPECT_DOUBLE_EQ(LearningRate(o, 13), 0.1);              // Last step reaches min_lr.
}

TEST(LrScheduleTest, ConstantAfterWarmup) {
  LrScheduleOptions o{.lr = 2.0, .warmup_steps = 2, .steps = 10, .cosine = false};
  EXPECT_DOUBLE_EQ(LearningRate(o, 0), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 9), 2.0);
}

}  // namespace
}  // namespace tessera::parallel
