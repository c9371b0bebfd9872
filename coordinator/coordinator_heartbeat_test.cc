// Heartbeats: the ranks a heartbeat lists are reconciled with the placed ones, and a heartbeat
// without the coordinator's lock (WorkerLiveness::TryFastBeat): a heartbeat that repeats
// the worker's previous one renews its time only; anything that could change what the heartbeat
// means — its listed ranks, its acknowledgement, a change to any job's ranks, the worker lost or
// registered again — sends it through the locked path, which reconciles as before.
#include <thread>

#include "coordinator/coordinator_test_fixture.h"
#include "gmock/gmock.h"

namespace tessera::coordinator {
namespace {

using ::testing::HasSubstr;

// `worker`'s heartbeat in session sessions_[worker], acknowledging `applied`, listing `placed` ranks.
v1::HeartbeatRequest Beat(const std::string& worker, int64_t session, int64_t applied,
                          const std::vector<v1::Assignment>& placed) {
  v1::HeartbeatRequest hb;
  hb.set_worker_id(worker);
  hb.set_session(session);
  hb.set_applied_seq(applied);
  hb.set_reports_ranks(true);
  for (const v1::Assignment& a : placed) {
    v1::RunningRank* r = hb.add_ranks();
    r->set_job_id(a.job_id());
    r->set_attempt(a.attempt());
    r->set_rank(a.rank());
    r->set_device(a.local_rank());
  }
  return hb;
}

int DevicesInUse(Coordinator& c, const std::string& worker) {
  for (const v1::Worker& w : c.ListWorkers()) {
    if (w.id() == worker) return w.devices_in_use();
  }
  return -1;
}

TEST_F(CoordinatorTest, ARepeatedHeartbeatSkipsTheLockUntilAJobChanges) {
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(0, &id, &on_a, &on_b));
  const v1::HeartbeatRequest hb = Beat("a", sessions_["a"], on_a.seq(), {on_a});
  const v1::HeartbeatRequest hb_b = Beat("b", sessions_["b"], on_b.seq(), {on_b});
  auto before = c_->HeartbeatsByPath();
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  ASSERT_TRUE(c_->Heartbeat(hb_b).ok());
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Milliseconds(100));
    ASSERT_TRUE(c_->Heartbeat(hb).ok());
    ASSERT_TRUE(c_->Heartbeat(hb_b).ok());
  }
  auto after = c_->HeartbeatsByPath();
  EXPECT_EQ(after.locked - before.locked, 2);  // The first one of each, which reconciled.
  EXPECT_EQ(after.fast - before.fast, 10);
  // The fast path renews the time: a is alive past the heartbeat timeout (200 ms) since its first.
  c_->CheckLiveness();
  EXPECT_EQ(c_->ListWorkers()[0].state(), v1::Worker::STATE_ALIVE);
  EXPECT_EQ(State(id), v1::JOB_STATE_RUNNING);
  // The job is cancelled: the same heartbeat now lists a rank of a job that ended — a superseded rank
  // still stopping, which holds its device. Only the locked path sees that.
  ASSERT_TRUE(c_->Cancel(id).ok());
  before = c_->HeartbeatsByPath();
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  after = c_->HeartbeatsByPath();
  EXPECT_EQ(after.locked - before.locked, 1);
  EXPECT_EQ(DevicesInUse(*c_, "a"), 1);
  // Its exit reported, and the rank no longer listed: the device is free.
  Report("a", on_a, v1::ReportRankStatusRequest::EVENT_EXITED, 143);
  ASSERT_TRUE(c_->Heartbeat(Beat("a", sessions_["a"], on_a.seq(), {})).ok());
  EXPECT_EQ(DevicesInUse(*c_, "a"), 0);
}

TEST_F(CoordinatorTest, ARankThatVanishesFromRepeatedHeartbeatsIsGone) {
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(1, &id, &on_a, &on_b));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c_->Heartbeat(Beat("b", sessions_["b"], on_b.seq(), {on_b})).ok());
  EXPECT_EQ(State(id), v1::JOB_STATE_RUNNING);
  // The same session and acknowledgement, without the rank (it died and its report was lost).
  ASSERT_TRUE(c_->Heartbeat(Beat("b", sessions_["b"], on_b.seq(), {})).ok());
  EXPECT_EQ(State(id), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(c_->GetJob(id)->reason(), HasSubstr("worker b no longer has rank 1 of attempt 1"));
}

TEST_F(CoordinatorTest, AnAcknowledgementInARepeatedHeartbeatIsApplied) {
  const std::string a = AddWorker("a", 1);
  const int64_t session = sessions_["a"];
  v1::HeartbeatRequest hb = Beat(a, session, 0, {});
  hb.set_reports_ranks(false);  // Acknowledging only: the same message but for applied_seq.
  auto job = c_->Submit(Spec(1, 1), 0);
  ASSERT_TRUE(job.ok()) << job.status();
  const int64_t stream = c_->StreamOpened(a, session);
  ASSERT_TRUE(c_->WaitForStore().ok());  // The START order leaves once its attempt is durable.
  auto given = c_->NextAssignment(a, absl::ZeroDuration(), session, stream);
  ASSERT_TRUE(given.ok() && given->has_value());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c_->Heartbeat(hb).ok());  // Given, not yet applied.
  // Acknowledged, then repeated: a new stream is not given the order again.
  hb.set_applied_seq((*given)->seq());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c_->Heartbeat(hb).ok());
  const int64_t next = c_->StreamOpened(a, session);
  auto again = c_->NextAssignment(a, absl::ZeroDuration(), session, next);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());
}

TEST_F(CoordinatorTest, ARepeatedHeartbeatOfALostOrReplacedWorkerIsRefused) {
  const std::string a = AddWorker("a", 1);
  const int64_t first = sessions_["a"];
  const v1::HeartbeatRequest hb = Beat(a, first, 0, {});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c_->Heartbeat(hb).ok());
  clock_.Advance(absl::Milliseconds(300));  // Beyond the heartbeat timeout.
  c_->CheckLiveness();
  absl::Status lost = c_->Heartbeat(hb);
  EXPECT_EQ(lost.code(), absl::StatusCode::kNotFound) << lost;
  lost = c_->Heartbeat(a);  // Unfenced (session 0).
  EXPECT_EQ(lost.code(), absl::StatusCode::kNotFound) << lost;
  // Back with a new registration: the old session's repeated heartbeat is over.
  AddWorker("a", 1);
  ASSERT_NE(sessions_["a"], first);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c_->Heartbeat(Beat(a, sessions_["a"], 0, {})).ok());
  absl::Status old = c_->Heartbeat(hb);
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition) << old;
  // An unfenced heartbeat (session 0) of a live worker takes the fast path too.
  const auto before = c_->HeartbeatsByPath();
  EXPECT_TRUE(c_->Heartbeat(a).ok());
  EXPECT_EQ(c_->HeartbeatsByPath().fast - before.fast, 1);
}

// A repeated heartbeat takes the path without the lock; CheckLiveness may declare its worker lost (and
// take the fence from the previous heartbeat) between that path's check of the session and its beat.
// The heartbeat must then be refused: an OK would renew the worker's lease past the fence.
TEST_F(CoordinatorTest, AHeartbeatRacingTheLossOfItsWorkerIsRefused) {
  const std::string a = AddWorker("a", 1);
  const v1::HeartbeatRequest hb = Beat(a, sessions_["a"], 0, {});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c_->Heartbeat(hb).ok());
  clock_.Advance(absl::Milliseconds(300));  // Beyond the heartbeat timeout.
  bool ran = false;
  before_fast_beat_ = [&] {
    if (ran) return;
    ran = true;
    std::thread liveness([&] { c_->CheckLiveness(); });  // Another thread, as in the daemon.
    liveness.join();
  };
  const auto before = c_->HeartbeatsByPath();
  absl::Status s = c_->Heartbeat(hb);
  ASSERT_TRUE(ran) << "the heartbeat took the path without the lock";
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(c_->HeartbeatsByPath().fast - before.fast, 0);
  for (const v1::Worker& w : c_->ListWorkers()) EXPECT_EQ(w.state(), v1::Worker::STATE_LOST);
  before_fast_beat_ = nullptr;
}

TEST_F(CoordinatorTest, AHeartbeatWithoutARankWhoseStartIsAcknowledgedFailsTheAttempt) {
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(1, &id, &on_a, &on_b));
  ASSERT_EQ(State(id), v1::JOB_STATE_RUNNING);
  v1::HeartbeatRequest hb;
  hb.set_worker_id("b");
  hb.set_session(sessions_["b"]);
  hb.set_reports_ranks(true);
  // b has not acknowledged the start yet: its rank not being listed says nothing.
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  EXPECT_EQ(State(id), v1::JOB_STATE_RUNNING);
  // Acknowledged and listed (running, or exited with the report still on its way): fine.
  hb.set_applied_seq(on_b.seq());
  auto* listed = hb.add_ranks();
  listed->set_job_id(id);
  listed->set_attempt(1);
  listed->set_rank(on_b.rank());
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  EXPECT_EQ(State(id), v1::JOB_STATE_RUNNING);
  // Without reports_ranks the list is not a claim.
  hb.clear_ranks();
  hb.set_reports_ranks(false);
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  EXPECT_EQ(State(id), v1::JOB_STATE_RUNNING);
  // Acknowledged and gone, its exit report lost: the attempt fails, blamed on b, and a's rank stops.
  hb.set_reports_ranks(true);
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  auto after = c_->GetJob(id);
  EXPECT_EQ(after->state(), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(after->reason(),
              HasSubstr("worker b no longer has rank " + std::to_string(on_b.rank()) + " of attempt 1"));
  ASSERT_GE(after->history_size(), 1);
  EXPECT_EQ(after->history(0).failed_worker(), "b");
  auto stop = Drain("a");
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].action(), v1::Assignment::ACTION_STOP);
  // a's rank stops and reports it: the job is queued again and placed (restarts left: 1).
  Report("a", on_a, v1::ReportRankStatusRequest::EVENT_EXITED, -15);
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
}

}  // namespace
}  // namespace tessera::coordinator

namespace tessera::coordinator {
namespace {

// Deadlines run on the monotonic clock (common/time/clock.h): a 60 s step of the coordinator host's
// wall clock, forward or back, loses no worker and moves no fence; what people see (job timestamps,
// a worker's last heartbeat) follows the wall clock.
TEST_F(CoordinatorTest, AWallClockStepLosesNoWorkerAndShowsTheWallTime) {
  AddWorker("a", 1);
  AddWorker("b", 1);
  AdvanceWithHeartbeats(absl::Milliseconds(100), {"a", "b"});
  clock_.StepWall(absl::Seconds(60));
  AdvanceWithHeartbeats(absl::Milliseconds(100), {"a", "b"});
  clock_.StepWall(absl::Seconds(-120));
  AdvanceWithHeartbeats(absl::Milliseconds(100), {"a", "b"});
  for (const v1::Worker& w : c_->ListWorkers()) {
    EXPECT_EQ(w.state(), v1::Worker::STATE_ALIVE) << w.name();
    EXPECT_EQ(w.last_heartbeat_unix_ms(), absl::ToUnixMillis(clock_.WallNow())) << "shown on the wall clock";
  }
  auto job = c_->Submit(Spec(1, 1), 0);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->created_unix_ms(), absl::ToUnixMillis(clock_.WallNow()));
}

}  // namespace
}  // namespace tessera::coordinator
