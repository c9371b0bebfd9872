// The heartbeat timing's defaults and the orderings every combination of flags must keep.
#include "coordinator/heartbeat_timing.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(HeartbeatTimingTest, ProductionDefaultsAndTheEarlierDerivation) {
  auto t = HeartbeatTimingOf({});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->interval, absl::Seconds(5));
  EXPECT_EQ(t->lease, absl::Seconds(15));
  EXPECT_EQ(t->timeout, absl::Seconds(20)) << "a silent worker is lost within lease + 1 interval";
  EXPECT_EQ(t->name_hold, absl::Seconds(7)) << "above the interval: a live worker never loses its name";
  // Only the timeout given (the tests, older deployments): as before.
  auto old = HeartbeatTimingOf({.timeout_s = 10});
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->interval, absl::Seconds(1));
  EXPECT_EQ(old->lease, absl::Seconds(8));
  EXPECT_EQ(old->name_hold, absl::Seconds(3));
  auto five = HeartbeatTimingOf({.timeout_s = 5});
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(five->lease, absl::Seconds(3));
  // An interval alone: the lease and timeout follow it.
  auto two = HeartbeatTimingOf({.interval_ms = 2000});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->lease, absl::Seconds(6));
  EXPECT_EQ(two->timeout, absl::Seconds(8));
  // No lease: the timeout is 4 intervals.
  auto none = HeartbeatTimingOf({.lease_ms = 0});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->lease, absl::ZeroDuration());
  EXPECT_EQ(none->timeout, absl::Seconds(20));
}

TEST(HeartbeatTimingTest, OrderingsAreEnforcedNamingTheFlag) {
  EXPECT_THAT(HeartbeatTimingOf({.interval_ms = 50}).status().message(), HasSubstr("--heartbeat_interval_ms 50"));
  EXPECT_THAT(HeartbeatTimingOf({.interval_ms = 700000}).status().message(), HasSubstr("between 100 and 600000"));
  EXPECT_THAT(HeartbeatTimingOf({.lease_ms = 2147483647}).status().message(),
              HasSubstr("--worker_lease_ms 2147483647 must be at most 3600000")) << "sent in 32-bit milliseconds";
  EXPECT_THAT(HeartbeatTimingOf({.interval_ms = 5000, .timeout_s = 5}).status().message(),
              HasSubstr("--heartbeat_timeout_s 5s must exceed the heartbeat interval 5s"));
  EXPECT_THAT(HeartbeatTimingOf({.interval_ms = 5000, .lease_ms = 4000}).status().message(),
              HasSubstr("--worker_lease_ms 4000 must exceed the heartbeat interval (5s)"));
  EXPECT_THAT(HeartbeatTimingOf({.timeout_s = 10, .lease_ms = 10000}).status().message(),
              HasSubstr("be below the heartbeat timeout (10s)"));
  for (int interval : {100, 1000, 5000, 30000}) {
    for (int lease : {-1, 0}) {
      auto t = HeartbeatTimingOf({.interval_ms = interval, .lease_ms = lease});
      ASSERT_TRUE(t.ok()) << interval << " " << lease << ": " << t.status();
      EXPECT_LT(t->interval, t->name_hold);
      EXPECT_LT(t->name_hold, t->timeout);
      if (t->lease > absl::ZeroDuration()) EXPECT_LT(t->lease, t->timeout);
    }
  }
}

}  // namespace
}  // namespace tessera::coordinator
