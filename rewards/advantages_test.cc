// ComputeAdvantages against the definition in advantages.h, worked by hand on small groups; the same
// numbers against TRL's own GRPOTrainer are tests/python/grpo_advantages_test.py's.
#include "rewards/advantages.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::rewards {
namespace {

using ::testing::HasSubstr;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

TEST(AdvantagesTest, GroupScaleByHand) {
  // One function, two groups of two: rewards (1, 3) and (2, 2).
  auto a = ComputeAdvantages({{1, 3, 2, 2}}, {.group_size = 2});
  ASSERT_TRUE(a.ok()) << a.status();
  const double s = std::sqrt(2.0);  // Unbiased std of (1, 3).
  EXPECT_DOUBLE_EQ(a->advantages[0], -1 / (s + 1e-4));
  EXPECT_DOUBLE_EQ(a->advantages[1], 1 / (s + 1e-4));
  EXPECT_DOUBLE_EQ(a->advantages[2], 0);  // A group that teaches nothing.
  EXPECT_DOUBLE_EQ(a->reward, 2);
  EXPECT_DOUBLE_EQ(a->reward_std, s / 2);
  EXPECT_DOUBLE_EQ(a->frac_reward_zero_std, 0.5);
}

TEST(AdvantagesTest, WeightsNansBatchAndNoScale) {
  // Two functions weighted 1 and 0.5; the second scores only completions 0 and 3.
  const std::vector<std::vector<double>> per = {{1, 0, 1, 0}, {4, kNan, kNan, 2}};
  auto batch = ComputeAdvantages(per, {.group_size = 2, .scale = RewardScale::kBatch, .weights = {1, 0.5}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->rewards, (std::vector<double>{3, 0, 1, 1}));
  const double s = std::sqrt(((3 - 1.25) * (3 - 1.25) + 1.25 * 1.25 + 0.25 * 0.25 + 0.25 * 0.25) / 3);
  EXPECT_DOUBLE_EQ(batch->advantages[0], 1.5 / (s + 1e-4));
  EXPECT_DOUBLE_EQ(batch->advantages[3], 0);
  EXPECT_DOUBLE_EQ(batch->reward_std, s);
  EXPECT_DOUBLE_EQ(batch->function_mean[1], 3);
  EXPECT_DOUBLE_EQ(batch->function_std[1], std::sqrt(2.0));
  auto none = ComputeAdvantages(per, {.group_size = 2, .scale = RewardScale::kNone, .weights = {1, 0.5}});
  ASSERT_TRUE(none.ok());
  EXPECT_DOUBLE_EQ(none->advantages[0], 1.5);
  EXPECT_DOUBLE_EQ(none->reward_std, (std::sqrt(4.5) + 0) / 2);  // Still the groups' std, for the log.
}

TEST(AdvantagesTest, AFunctionThatScoredNothingIsNanAndAddsNothing) {
  auto a = ComputeAdvantages({{1, 2}, {kNan, kNan}}, {.group_size = 2});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->rewards, (std::vector<double>{1, 2}));
  EXPECT_TRUE(std::isnan(a->function_mean[1]));
  EXPECT_TRUE(std::isnan(a->function_std[1]));
}

TEST(AdvantagesTest, BadInputIsRefusedByName) {
  EXPECT_THAT(ComputeAdvantages({}, {}).status().message(), HasSubstr("no reward function"));
  EXPECT_THAT(ComputeAdvantages({{1, 2, 3}}, {.group_size = 2}).status().message(),
              HasSubstr("3 completions are not whole groups of 2"));
  EXPECT_THAT(ComputeAdvantages({{1, 2}}, {.group_size = 1}).status().message(), HasSubstr("group size 1"));
  EXPECT_THAT(ComputeAdvantages({{1, 2}, {1}}, {.group_size = 2}).status().message(),
              HasSubstr("reward function 1 scored 1 completions"));
  EXPECT_THAT(ComputeAdvantages({{1, 2}}, {.group_size = 2, .weights = {1, 2}}).status().message(),
              HasSubstr("2 weights for 1 reward functions"));
  EXPECT_THAT(ComputeAdvantages({{1, 2}}, {.group_size = 2, .weights = {kNan}}).status().message(),
              HasSubstr("weight 0 is nan"));
  EXPECT_THAT(ComputeAdvantages({{1, std::numeric_limits<double>::infinity()}}, {.group_size = 2}).status().message(),
              HasSubstr("reward function 0 gave inf for completion 1"));
}

}  // namespace
}  // namespace tessera::rewards
