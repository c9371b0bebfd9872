#include "coordinator/placement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

TEST(PlacementTest, TensorParallelGroupsStayInsideOneWorker) {
  // Two workers with 3 free devices each; 4 ranks with tp=2: groups {0,1} and {2,3} must not split.
  auto slots = PlaceRanks(4, 2, {{"a", {0, 1, 2}}, {"b", {0, 1, 2}}});
  ASSERT_TRUE(slots.ok());
  ASSERT_EQ(slots->size(), 4u);
  EXPECT_EQ((*slots)[0].worker_id, (*slots)[1].worker_id);
  EXPECT_EQ((*slots)[2].worker_id, (*slots)[3].worker_id);
}

TEST(PlacementTest, FillsTheWorkerWithMostFreeDevicesFirst) {
  auto slots = PlaceRanks(2, 1, {{"small", {0}}, {"big", {1, 3}}});
  ASSERT_TRUE(slots.ok());
  EXPECT_EQ((*slots)[0].worker_id, "big");
  EXPECT_EQ((*slots)[0].local_rank, 1);
  EXPECT_EQ((*slots)[1].local_rank, 3);
}

TEST(PlacementTest, SplitsAGroupOnlyWhenNoWorkerHoldsIt) {
  auto slots = PlaceRanks(2, 2, {{"a", {0}}, {"b", {0}}});
  ASSERT_TRUE(slots.ok());
  EXPECT_NE((*slots)[0].worker_id, (*slots)[1].worker_id);
}

TEST(PlacementTest, TooFewDevicesIsAReason) {
  auto slots = PlaceRanks(8, 2, {{"a", {0, 1}}, {"b", {0, 1}}});
  ASSERT_FALSE(slots.ok());
  EXPECT_EQ(slots.status().message(), "needs 8 devices; 4 free on 2 workers");
}

}  // namespace
}  // namespace tessera::coordinator
