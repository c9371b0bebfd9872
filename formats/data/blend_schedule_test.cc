#include "formats/data/blend_schedule.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::data {
namespace {

using ::testing::HasSubstr;

TEST(BlendScheduleTest, EveryPrefixIsWithinOneSampleOfTheWeights) {
  auto s = BlendSchedule::Create({0.5, 0.3, 0.2});
  ASSERT_TRUE(s.ok());
  std::vector<int64_t> counts(3, 0);
  for (int64_t g = 0; g < 20000; ++g) {
    auto pick = s->Pick(g);
    ASSERT_TRUE(pick.ok());
    ASSERT_EQ(pick->sample, counts[pick->source]) << g;  // Each source's samples in order.
    ++counts[pick->source];
    const double w[3] = {0.5, 0.3, 0.2};
    for (int k = 0; k < 3; ++k) ASSERT_LT(std::abs(counts[k] - w[k] * (g + 1)), 1.0) << "g " << g << " source " << k;
  }
}

TEST(BlendScheduleTest, RestoredFromCountsContinuesTheSameSequence) {
  auto whole = BlendSchedule::Create({7, 3});
  auto resumed = BlendSchedule::Create({7, 3});
  ASSERT_TRUE(whole.ok() && resumed.ok());
  auto counts = whole->CountsAt(12345);
  ASSERT_TRUE(counts.ok());
  ASSERT_TRUE(resumed->Restore(12345, *counts).ok());
  for (int64_t g = 12345; g < 20000; ++g) {
    auto a = whole->Pick(g), b = resumed->Pick(g);
    ASSERT_EQ(a->source, b->source) << g;
    ASSERT_EQ(a->sample, b->sample) << g;
  }
  // Stepping back within recent samples gives the same picks again; before the restored position, nothing.
  auto again = resumed->Pick(15000);
  auto first = whole->Pick(15000);
  EXPECT_EQ(again->source, first->source);
  EXPECT_EQ(again->sample, first->sample);
  EXPECT_THAT(std::string(resumed->Pick(100).status().message()), HasSubstr("before the restored position 12345"));
}

TEST(BlendScheduleTest, BadWeightsAndCountsAreRefused) {
  EXPECT_FALSE(BlendSchedule::Create({}).ok());
  EXPECT_THAT(std::string(BlendSchedule::Create({1, 0}).status().message()), HasSubstr("blend weight 1 is 0"));
  EXPECT_FALSE(BlendSchedule::Create({1, NAN}).ok());
  EXPECT_FALSE(BlendSchedule::Create({1, INFINITY}).ok());
  auto s = BlendSchedule::Create({1, 1});
  EXPECT_THAT(std::string(s->Restore(10, {3, 4}).message()), HasSubstr("sum to 7, not to the position 10"));
  EXPECT_THAT(std::string(s->Restore(10, {10}).message()), HasSubstr("1 sources"));
  EXPECT_FALSE(s->Restore(0, {-1, 1}).ok());
}

}  // namespace
}  // namespace tessera::formats::data
