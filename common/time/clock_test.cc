#include "common/time/clock.h"

#include "common/time/fake_clock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// The real clock's arithmetic over sources the test moves: a 60 s wall step forwards or backwards (an
// NTP step, a VM resume) moves WallNow() only; Now() moves with the monotonic source alone.
TEST(ClockTest, WallStepsMoveNoDeadline) {
  absl::Time wall = absl::FromUnixSeconds(1'800'000'000);
  absl::Duration steady = absl::Seconds(12345);
  auto clock = NewMonotonicClock({[&] { return wall; }, [&] { return steady; }});
  const absl::Time start = clock->Now();
  EXPECT_EQ(start, wall) << "anchored at the wall time when made";
  wall += absl::Seconds(60);
  EXPECT_EQ(clock->Now(), start);
  EXPECT_EQ(clock->WallNow(), start + absl::Seconds(60));
  wall -= absl::Seconds(120);
  EXPECT_EQ(clock->Now(), start) << "never backwards";
  steady += absl::Seconds(2);
  wall += absl::Seconds(2);
  EXPECT_EQ(clock->Now(), start + absl::Seconds(2));
  EXPECT_EQ(clock->ToWall(start), clock->WallNow() - absl::Seconds(2)) << "shown on the wall clock";
}

TEST(ClockTest, RealClockNeverGoesBackwards) {
  Clock* clock = RealClock();
  absl::Time last = clock->Now();
  for (int i = 0; i < 100000; ++i) {
    const absl::Time t = clock->Now();
    ASSERT_GE(t, last);
    last = t;
  }
  EXPECT_LT(absl::AbsDuration(clock->WallNow() - absl::Now()), absl::Seconds(1));
}

TEST(ClockTest, FakeClockStepsTheWallAlone) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  clock.StepWall(absl::Seconds(-60));
  EXPECT_EQ(clock.Now(), start);
  EXPECT_EQ(clock.WallNow(), start - absl::Seconds(60));
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(clock.WallNow(), start - absl::Seconds(59));
}

}  // namespace
}  // namespace tessera
