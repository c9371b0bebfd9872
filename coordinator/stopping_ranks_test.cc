// StoppingRanks alone: the set a worker lists, since when each rank is listed, the quarantine past
// the deadline, and what a rank no longer listed leaves behind (nothing).
#include "coordinator/stopping_ranks.h"

#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

using Key = StoppingRanks::Key;
const absl::Time kT0 = absl::FromUnixSeconds(1000);
const Key kA{"job-000001", 1, 0};
const Key kB{"job-000002", 3, 1};

TEST(StoppingRanksTest, TheListedSetIsKeptAndAChangeIsReported) {
  StoppingRanks s;
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(s.Set({}, kT0));
  EXPECT_TRUE(s.Set({{kA, 0}, {kB, 2}}, kT0));
  EXPECT_FALSE(s.Set({{kA, 0}, {kB, 2}}, kT0 + absl::Seconds(1))) << "the same list again";
  EXPECT_TRUE(s.Set({{kA, 0}, {kB, 3}}, kT0 + absl::Seconds(2))) << "a rank on another device";
  EXPECT_TRUE(s.UsesDevice(0));
  EXPECT_TRUE(s.UsesDevice(3));
  EXPECT_FALSE(s.UsesDevice(2));
  EXPECT_TRUE(s.HoldsJob(kA));
  EXPECT_FALSE(s.HoldsJob({"job-000003", 1, 0}));
}

TEST(StoppingRanksTest, ARankListedPastTheDeadlineIsQuarantinedOnceAndHoldsItsJobBackNoMore) {
  StoppingRanks s;
  s.Set({{kA, 0}}, kT0);
  s.Set({{kA, 0}, {kB, 1}}, kT0 + absl::Seconds(50));  // kA keeps its first time.
  EXPECT_TRUE(s.QuarantineOverdue(kT0 + absl::Seconds(119), absl::Seconds(120)).empty());
  const std::vector<std::string> first = s.QuarantineOverdue(kT0 + absl::Seconds(120), absl::Seconds(120));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0],
            "rank 0 of job-000001 attempt 1 could not be stopped for 2m (listed by the worker after SIGKILL); "
            "device 0 quarantined until the worker no longer lists it");
  EXPECT_FALSE(s.HoldsJob(kA));
  EXPECT_TRUE(s.HoldsJob(kB));
  EXPECT_TRUE(s.UsesDevice(0)) << "a quarantined rank's device stays out of placement";
  EXPECT_TRUE(s.QuarantineOverdue(kT0 + absl::Seconds(121), absl::Seconds(120)).empty()) << "once";
  ASSERT_EQ(s.quarantined().size(), 1u);
  EXPECT_EQ(s.quarantined()[0].key, kA);
  EXPECT_EQ(s.quarantined()[0].device, 0);
  EXPECT_EQ(s.QuarantineOverdue(kT0 + absl::Seconds(170), absl::Seconds(120)).size(), 1u) << "kB's turn";
}

TEST(StoppingRanksTest, ARankNoLongerListedIsForgottenWithItsQuarantineAndItsTime) {
  StoppingRanks s;
  s.Set({{kA, 0}}, kT0);
  ASSERT_EQ(s.QuarantineOverdue(kT0 + absl::Minutes(3), absl::Minutes(2)).size(), 1u);
  EXPECT_TRUE(s.Set({}, kT0 + absl::Minutes(4)));
  EXPECT_TRUE(s.quarantined().empty());
  EXPECT_FALSE(s.UsesDevice(0));
  // Listed again later (a new stuck rank with the same key): timed from then.
  s.Set({{kA, 0}}, kT0 + absl::Minutes(5));
  EXPECT_TRUE(s.QuarantineOverdue(kT0 + absl::Minutes(6), absl::Minutes(2)).empty());
  EXPECT_TRUE(s.HoldsJob(kA));
}

}  // namespace
}  // namespace tessera::coordinator
