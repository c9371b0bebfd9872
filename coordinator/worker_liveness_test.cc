// WorkerLiveness on a FakeClock: a repeated heartbeat takes the fast path only while nothing it would
// read under the coordinator's lock changed (session, acknowledgement, listed ranks, a rank change, a
// loss — each case alone sends it to the lock); a loss between the fast path's check and its beat is
// seen; silence and the fence a lost worker's jobs wait out follow the clock.
#include "coordinator/worker_liveness.h"

#include <memory>
#include <string>

#include "common/time/fake_clock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

v1::HeartbeatRequest Beat(const std::string& worker, int64_t session, int64_t applied, int ranks) {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker);
  req.set_session(session);
  req.set_applied_seq(applied);
  req.set_reports_ranks(true);
  for (int r = 0; r < ranks; ++r) {
    v1::RunningRank* rank = req.add_ranks();
    rank->set_job_id("job-1");
    rank->set_attempt(1);
    rank->set_rank(r);
    rank->set_device(r);
  }
  return req;
}

class WorkerLivenessTest : public ::testing::Test {
 protected:
  WorkerLiveness::Options Opts() {
    WorkerLiveness::Options o;
    o.heartbeat_timeout = absl::Seconds(10);
    o.worker_lease = absl::Seconds(5);
    o.clock = &clock_;
    o.before_fast_beat_for_test = [this] {
      if (hook_) hook_();
    };
    return o;
  }
  // A heartbeat the coordinator applied under its lock: the worker's time renewed, what it saw kept.
  void ApplyLocked(WorkerLiveness& l, WorkerLiveness::Record& r, const v1::HeartbeatRequest& req) {
    l.CountLockedBeat();
    l.Beat(r);
    l.Applied(r, req, WorkerLiveness::RanksDigest(req));
  }
  bool Fast(WorkerLiveness& l, const v1::HeartbeatRequest& req) {
    return l.TryFastBeat(req, WorkerLiveness::RanksDigest(req));
  }

  FakeClock clock_;
  std::function<void()> hook_;
};

TEST_F(WorkerLivenessTest, ARepeatedHeartbeatTakesTheFastPathOnlyAfterOneWasAppliedUnderTheLock) {
  WorkerLiveness l(Opts());
  auto r = std::make_shared<WorkerLiveness::Record>();
  EXPECT_FALSE(Fast(l, Beat("w", 7, 0, 2))) << "unknown worker";
  l.Registered("w", r, 7);
  EXPECT_EQ(r->session(), 7);
  const v1::HeartbeatRequest hb = Beat("w", 7, 0, 2);
  EXPECT_FALSE(Fast(l, hb)) << "nothing applied under the lock yet in this session";
  ApplyLocked(l, *r, hb);
  clock_.Advance(absl::Seconds(3));
  EXPECT_TRUE(Fast(l, hb));
  EXPECT_EQ(r->LastHeartbeat(), clock_.Now()) << "the fast path renews the worker's time";
  EXPECT_TRUE(Fast(l, hb));
  EXPECT_EQ(l.paths().fast, 2);
  EXPECT_EQ(l.paths().locked, 1);
}

TEST_F(WorkerLivenessTest, EachChangeAloneSendsTheHeartbeatToTheLock) {
  WorkerLiveness l(Opts());
  auto r = std::make_shared<WorkerLiveness::Record>();
  l.Registered("w", r, 7);
  const v1::HeartbeatRequest hb = Beat("w", 7, 3, 2);
  ApplyLocked(l, *r, hb);
  ASSERT_TRUE(Fast(l, hb));
  EXPECT_FALSE(Fast(l, Beat("w", 8, 3, 2))) << "another session";
  EXPECT_FALSE(Fast(l, Beat("w", 7, 4, 2))) << "a new acknowledgement";
  EXPECT_FALSE(Fast(l, Beat("w", 7, 3, 1))) << "another list of ranks";
  v1::HeartbeatRequest unlisted = hb;
  unlisted.set_reports_ranks(false);
  EXPECT_FALSE(Fast(l, unlisted)) << "no list where the applied one had one";
  ASSERT_TRUE(Fast(l, hb));
  l.RanksChanged();
  EXPECT_FALSE(Fast(l, hb)) << "a job's ranks changed since";
  ApplyLocked(l, *r, hb);
  ASSERT_TRUE(Fast(l, hb)) << "applied again under the lock: fast again";
  l.Lost(*r);
  EXPECT_EQ(r->session(), -1);
  EXPECT_FALSE(Fast(l, hb)) << "lost";
  v1::HeartbeatRequest unfenced = hb;
  unfenced.set_session(0);
  EXPECT_FALSE(Fast(l, unfenced)) << "lost, also without a session";
  l.Registered("w", r, 9);
  EXPECT_FALSE(Fast(l, Beat("w", 9, 3, 2))) << "a new registration forgets what the old session saw";
}

TEST_F(WorkerLivenessTest, AHeartbeatWithoutSessionRenewsALiveWorkerWithoutTheLock) {
  WorkerLiveness l(Opts());
  auto r = std::make_shared<WorkerLiveness::Record>();
  l.Registered("w", r, 7);
  v1::HeartbeatRequest unfenced;
  unfenced.set_worker_id("w");
  clock_.Advance(absl::Seconds(4));
  EXPECT_TRUE(Fast(l, unfenced));
  EXPECT_EQ(l.SinceBeat(*r), absl::ZeroDuration());
}

TEST_F(WorkerLivenessTest, ALossBetweenTheCheckAndTheBeatIsSeen) {
  WorkerLiveness l(Opts());
  auto r = std::make_shared<WorkerLiveness::Record>();
  l.Registered("w", r, 7);
  const v1::HeartbeatRequest hb = Beat("w", 7, 0, 1);
  ApplyLocked(l, *r, hb);
  // CheckLiveness declares the worker lost and reads its last heartbeat for the fence while the fast
  // path is between its check of the session and its beat.
  absl::Time fence_from;
  hook_ = [&] {
    l.Lost(*r);
    fence_from = r->LastHeartbeat();
  };
  clock_.Advance(absl::Seconds(2));
  EXPECT_FALSE(Fast(l, hb)) << "the heartbeat must go to the lock, which refuses a lost worker";
  EXPECT_EQ(l.paths().fast, 0);
  EXPECT_LT(fence_from, clock_.Now());
}

TEST_F(WorkerLivenessTest, SilenceAndTheFenceFollowTheClock) {
  WorkerLiveness l(Opts());
  auto r = std::make_shared<WorkerLiveness::Record>();
  l.Registered("w", r, 1);
  const absl::Time beat = clock_.Now();
  clock_.Advance(absl::Seconds(10));
  EXPECT_FALSE(l.Silent(*r)) << "exactly the timeout is not yet silent";
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(l.Silent(*r));
  EXPECT_EQ(l.SinceBeat(*r), absl::Seconds(10) + absl::Milliseconds(1));
  // Lease 5 s, then a 10 s grace and a 7 s stop delay, then the slack.
  EXPECT_EQ(l.SurelyStopped(*r, absl::Seconds(10), absl::Seconds(7)),
            beat + absl::Seconds(5) + absl::Seconds(10) + absl::Seconds(7) + WorkerLiveness::kFenceSlack);
  l.Beat(*r);
  EXPECT_FALSE(l.Silent(*r));

  WorkerLiveness::Options no_lease = Opts();
  no_lease.worker_lease = absl::ZeroDuration();
  WorkerLiveness unleased(no_lease);
  EXPECT_EQ(unleased.SurelyStopped(*r, absl::Seconds(10), absl::Seconds(7)), absl::InfinitePast())
      << "without a lease there is nothing to wait for";
}

TEST_F(WorkerLivenessTest, TheDigestTellsListsApart) {
  const uint64_t two = WorkerLiveness::RanksDigest(Beat("w", 1, 0, 2));
  EXPECT_EQ(two, WorkerLiveness::RanksDigest(Beat("w", 1, 5, 2))) << "only the ranks count";
  EXPECT_NE(two, WorkerLiveness::RanksDigest(Beat("w", 1, 0, 1)));
  v1::HeartbeatRequest other_device = Beat("w", 1, 0, 2);
  other_device.mutable_ranks(1)->set_device(5);
  EXPECT_NE(two, WorkerLiveness::RanksDigest(other_device));
  v1::HeartbeatRequest unlisted = Beat("w", 1, 0, 0);
  unlisted.set_reports_ranks(false);
  EXPECT_NE(WorkerLiveness::RanksDigest(Beat("w", 1, 0, 0)), WorkerLiveness::RanksDigest(unlisted));
}

}  // namespace
}  // namespace tessera::coordinator
