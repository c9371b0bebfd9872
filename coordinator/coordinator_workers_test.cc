// The worker-facing half of the coordinator (coordinator_workers.cc) without gRPC: registrations and
// their reconciliation, sessions, adoption after a coordinator restart, worker names, leases and fences.
// Assignment streams: coordinator_streams_test.cc; heartbeats: coordinator_heartbeat_test.cc.
#include <atomic>
#include <optional>
#include <set>
#include <thread>

#include "coordinator/coordinator_test_fixture.h"
#include "gmock/gmock.h"

namespace tessera::coordinator {
namespace {

using ::testing::HasSubstr;

TEST_F(CoordinatorTest, WorkerRegisteringAgainWithoutItsRanksFailsTheAttemptAndFencesOldStreams) {
  const std::string a = AddWorker("a", 1);
  auto first = c_->RegisterWorker(Registration("b", 1));
  ASSERT_TRUE(first.ok());
  auto job = c_->Submit(Spec(2, 1), 1);
  ASSERT_TRUE(job.ok()) << job.status();
  auto on_a = Drain(a), on_b = Drain("b");
  ASSERT_EQ(on_a.size(), 1u);
  ASSERT_EQ(on_b.size(), 1u);
  Report(a, on_a[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  Report("b", on_b[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  ASSERT_EQ(State(job->id()), v1::JOB_STATE_RUNNING);
  // b restarts (its rank died with it) and registers before any heartbeat timeout, running nothing.
  auto second = c_->RegisterWorker(Registration("b", 1));
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->session(), first->session());
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(c_->GetJob(job->id())->reason(), HasSubstr("worker b registered again without rank 1 of attempt 1"));
  // The dead process's stream (the first session) takes nothing any more; the new one does.
  auto stale = c_->NextAssignment("b", absl::ZeroDuration(), first->session());
  ASSERT_FALSE(stale.ok());
  EXPECT_THAT(stale.status().message(), HasSubstr("this stream of session"));
  // Nor are the old session's orders sent again to a stream of the new one.
  EXPECT_EQ(c_->StreamOpened("b", first->session()), 0);
  const int64_t stream = c_->StreamOpened("b", second->session());
  auto next = c_->NextAssignment("b", absl::ZeroDuration(), second->session(), stream);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());  // b's start of the old session is not given again.
}

// A pushed stream's receiving end (the gRPC reactor's part), recording what it was given.
TEST_F(CoordinatorTest, RestartedCoordinatorAdoptsReportedRanksAndRequeuesTheRest) {
  const std::string a = AddWorker("a", 1), b = AddWorker("b", 1);
  auto adopted = c_->Submit(Spec(1, 1), 0);
  auto lost = c_->Submit(Spec(1, 1), 0);
  auto on_a = Drain(a), on_b = Drain(b);
  ASSERT_EQ(on_a.size(), 1u);
  ASSERT_EQ(on_b.size(), 1u);
  Report(a, on_a[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  Report(b, on_b[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  const std::string adopted_id = on_a[0].job_id(), lost_id = on_b[0].job_id();
  Restart();
  ASSERT_EQ(c_->ListJobs().size(), 2u);
  EXPECT_THAT(c_->GetJob(adopted_id)->reason(), HasSubstr("coordinator restarted"));
  // Worker a comes back still running its rank; worker b comes back with nothing.
  v1::RegisterWorkerRequest r = Registration("a", 1);
  auto* running = r.add_running();
  running->set_job_id(adopted_id);
  running->set_attempt(1);
  running->set_rank(0);
  ASSERT_TRUE(c_->RegisterWorker(r).ok());
  EXPECT_EQ(State(adopted_id), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(c_->GetJob(adopted_id)->reason(), HasSubstr("carried on through a coordinator restart"));
  EXPECT_TRUE(Drain(a).empty()) << "an adopted rank is not stopped";
  AddWorker("b", 1);
  clock_.Advance(absl::Milliseconds(300));  // Past the adoption deadline (the heartbeat timeout)...
  ASSERT_TRUE(c_->Heartbeat("a").ok());     // ...with both workers alive.
  ASSERT_TRUE(c_->Heartbeat("b").ok());
  c_->CheckLiveness();
  // b's rank was not reported: the attempt ends and the job is placed again, without spending a
  // restart (it has none: max_restarts 0).
  EXPECT_EQ(State(lost_id), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(c_->GetJob(lost_id)->attempt(), 2);
  EXPECT_EQ(c_->GetJob(lost_id)->restarts_used(), 0);
  EXPECT_THAT(c_->GetJob(lost_id)->reason(), HasSubstr("not reported running after a coordinator restart"));
  // The adopted job finishes normally.
  Report(a, on_a[0], v1::ReportRankStatusRequest::EVENT_EXITED);
  EXPECT_EQ(State(adopted_id), v1::JOB_STATE_SUCCEEDED);
}

// The adopted attempt fails (the rank on worker a exits with an error) before worker b, which held
// the other rank, came back — b never does (it was SIGKILLed). At the adoption deadline b's rank
// counts as gone, and the job is placed again on the workers there are; the new attempt is not
// treated as adopted.
TEST_F(CoordinatorTest, AdoptedAttemptThatFailsIsRequeuedWhenItsOtherWorkerNeverReturns) {
  const std::string a = "a", b = "b";
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(AdoptedAttemptFailedOnA(&id, &on_a, &on_b));
  AddWorker("c", 1);
  clock_.Advance(absl::Milliseconds(450));  // Past the adoption deadline (2 heartbeat timeouts).
  ASSERT_TRUE(c_->Heartbeat("a").ok());
  ASSERT_TRUE(c_->Heartbeat("c").ok());
  c_->CheckLiveness();
  ASSERT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
  std::set<std::string> placed;
  const v1::Job requeued = *c_->GetJob(id);
  for (const auto& p : requeued.placement()) placed.insert(p.worker_id());
  EXPECT_EQ(placed, (std::set<std::string>{"a", "c"}));
  // Blamed on b, which never came back, though a's report ended the attempt more than two heartbeat
  // timeouts before the deadline named b (a late blame of a recent failure would not move any more).
  ASSERT_GE(requeued.history_size(), 1);
  EXPECT_EQ(requeued.history(0).failed_worker(), "b") << requeued.history(0).reason();
  EXPECT_THAT(requeued.history(0).reason(), HasSubstr("did not come back after the coordinator restarted"));
  // The new attempt runs as any other: nothing is adopted, so the deadline does not fail it.
  auto next_a = Drain(a), next_c = Drain("c");
  c_->CheckLiveness();  // Before its ranks report: a new attempt has no adoption deadline to miss.
  EXPECT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  ASSERT_FALSE(next_a.empty());
  ASSERT_EQ(next_c.size(), 1u);
  Report(a, next_a.back(), v1::ReportRankStatusRequest::EVENT_STARTED);
  Report("c", next_c[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  clock_.Advance(absl::Milliseconds(450));
  ASSERT_TRUE(c_->Heartbeat("a").ok());
  ASSERT_TRUE(c_->Heartbeat("c").ok());
  c_->CheckLiveness();
  EXPECT_EQ(State(id), v1::JOB_STATE_RUNNING) << c_->GetJob(id)->reason();
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
  EXPECT_THAT(c_->GetJob(id)->reason(), ::testing::Not(HasSubstr("coordinator restart")));
}

// The adopted attempt fails on worker a, then worker b registers again without its rank (it was
// restarted): every rank is gone, so the job is placed again at once, before the adoption deadline,
// and the new attempt is a fresh one (its ranks, slow to start, are not failed by the old deadline).
TEST_F(CoordinatorTest, AttemptAfterAFailedAdoptedOneIsNotAdopted) {
  const std::string a = "a", b = "b";
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(AdoptedAttemptFailedOnA(&id, &on_a, &on_b));
  AddWorker(b, 1);
  ASSERT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  ASSERT_EQ(c_->GetJob(id)->attempt(), 2);
  clock_.Advance(absl::Milliseconds(450));  // Past the old adoption deadline, the new ranks not started.
  ASSERT_TRUE(c_->Heartbeat(a).ok());
  ASSERT_TRUE(c_->Heartbeat(b).ok());
  c_->CheckLiveness();
  EXPECT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
}

// Two worker processes under one name: the second is refused while the first is alive, and accepted
// once the first has been silent for the name hold (as a restarted worker is); the first's heartbeats
// then fail, so it cannot keep the entry alive.
TEST_F(CoordinatorTest, ASecondLiveWorkerUnderANameInUseIsRefused) {
  v1::RegisterWorkerRequest first = Registration("node", 1);
  first.set_instance("p1");
  first.set_host("198.18.0.2");
  auto one = c_->RegisterWorker(first);
  ASSERT_TRUE(one.ok());
  v1::RegisterWorkerRequest second = Registration("node", 2);
  second.set_instance("p2");
  auto refused = c_->RegisterWorker(second);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(refused.status().message(), HasSubstr("worker name node is in use by a live worker at 198.18.0.2"));
  EXPECT_EQ(c_->ListWorkers().size(), 1u);
  EXPECT_EQ(c_->ListWorkers()[0].device_count(), 1) << "the entry is the first worker's";
  // The same process registering again (a reconnect) is not a second worker.
  ASSERT_TRUE(c_->RegisterWorker(first).ok());
  ASSERT_TRUE(c_->Heartbeat("node", 0).ok());
  // The first worker falls silent (killed): past the hold, the second gets the name.
  clock_.Advance(absl::Milliseconds(150));
  auto two = c_->RegisterWorker(second);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(c_->ListWorkers()[0].device_count(), 2);
  EXPECT_EQ(c_->Heartbeat("node", one->session()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(c_->Heartbeat("node", two->session()).ok());
}

// The attempt already failed (the rank on a saw its peer die) when worker b, restarted, registers
// again without its rank: that rank is gone, and the job is placed again at once.
TEST_F(CoordinatorTest, WorkerBackWithoutItsRankReleasesAnAttemptThatAlreadyFailed) {
  const std::string a = "a", b = "b";
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(2, &id, &on_a, &on_b));
  Report(a, on_a, v1::ReportRankStatusRequest::EVENT_EXITED, 1);
  ASSERT_EQ(State(id), v1::JOB_STATE_RESTARTING);
  ASSERT_EQ(c_->GetJob(id)->history(0).failed_worker(), "a");  // Its rank's report ended the attempt.
  AddWorker("b", 1);  // No rank running.
  EXPECT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
  // b's rank vanished unreported (b restarted): the cause, so the history names b.
  const v1::Attempt first = c_->GetJob(id)->history(0);
  EXPECT_EQ(first.failed_worker(), "b");
  EXPECT_THAT(first.reason(), HasSubstr("; then worker b registered again without rank 1"));
}

// b is lost while its rank runs on (a partition): the attempt fails and the job waits for a second
// device. b comes back still listing that rank (it lingers, e.g. waiting on an unreachable store): it
// is told to stop, and its device is not given to the next attempt until b no longer lists the rank.
TEST_F(CoordinatorTest, ASupersededRankStillRunningKeepsItsDeviceUntilItIsGone) {
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(2, &id, &on_a, &on_b));
  clock_.Advance(absl::Milliseconds(300));  // Past the 200 ms heartbeat timeout; only a beats.
  ASSERT_TRUE(c_->Heartbeat("a", sessions_["a"]).ok());
  c_->CheckLiveness();
  ASSERT_EQ(State(id), v1::JOB_STATE_RESTARTING) << c_->GetJob(id)->reason();
  Report("a", on_a, v1::ReportRankStatusRequest::EVENT_EXITED, -15);  // a's rank stopped.
  ASSERT_EQ(State(id), v1::JOB_STATE_PENDING) << c_->GetJob(id)->reason();
  Drain("a");
  // b registers again, its rank of attempt 1 still running on device 0.
  v1::RegisterWorkerRequest r = Registration("b", 1);
  auto* running = r.add_running();
  running->set_job_id(id);
  running->set_attempt(1);
  running->set_rank(on_b.rank());
  running->set_device(on_b.local_rank());
  auto b = c_->RegisterWorker(r);
  ASSERT_TRUE(b.ok()) << b.status();
  auto to_b = Drain("b");
  ASSERT_EQ(to_b.size(), 1u);
  EXPECT_EQ(to_b[0].action(), v1::Assignment::ACTION_STOP);
  EXPECT_EQ(State(id), v1::JOB_STATE_PENDING) << "b's only device is still taken";
  // Still listed in a heartbeat: still taken.
  v1::HeartbeatRequest hb;
  hb.set_worker_id("b");
  hb.set_session(b->session());
  hb.set_applied_seq(to_b[0].seq());
  hb.set_reports_ranks(true);
  *hb.add_ranks() = *running;
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  EXPECT_EQ(State(id), v1::JOB_STATE_PENDING);
  // Gone: attempt 2 is placed on a and b.
  hb.clear_ranks();
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  EXPECT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
}

// A worker's registration request delayed in a partition reaches the coordinator after the worker's
// next one was accepted: it is refused, and the newer registration (its session) stands.
TEST_F(CoordinatorTest, AStaleRegistrationOfTheSameWorkerProcessIsRefused) {
  v1::RegisterWorkerRequest first = Registration("a", 1), second = Registration("a", 1);
  first.set_instance("198.18.0.2/100/1");
  first.set_attempt(1);
  second.set_instance("198.18.0.2/100/1");
  second.set_attempt(2);
  auto accepted = c_->RegisterWorker(second);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  auto stale = c_->RegisterWorker(first);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(stale.status().message(), HasSubstr("registration 1 of worker a arrived after its registration 2"));
  EXPECT_TRUE(c_->Heartbeat("a", accepted->session()).ok()) << "the newer session stands";
  // A later request of the same process, or any request of a new process, is accepted.
  v1::RegisterWorkerRequest third = second;
  third.set_attempt(3);
  EXPECT_TRUE(c_->RegisterWorker(third).ok());
  v1::RegisterWorkerRequest restarted = Registration("a", 1);
  restarted.set_instance("198.18.0.2/200/2");
  restarted.set_attempt(1);
  clock_.Advance(absl::Milliseconds(300));  // The name hold (100 ms) of the previous process.
  EXPECT_TRUE(c_->RegisterWorker(restarted).ok());
}

// b is lost (a partition) and comes back with the exit of its rank that it could not report: the
// job is placed again at that registration — and not failed by it ("registered again without" its
// new rank, which it could not list yet).
TEST_F(CoordinatorTest, ARegistrationThatReportsExitsPlacesTheNextAttemptWithoutFailingIt) {
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(2, &id, &on_a, &on_b));
  clock_.Advance(absl::Milliseconds(300));
  ASSERT_TRUE(c_->Heartbeat("a", sessions_["a"]).ok());
  c_->CheckLiveness();  // b lost.
  Report("a", on_a, v1::ReportRankStatusRequest::EVENT_EXITED, 1);
  ASSERT_EQ(State(id), v1::JOB_STATE_PENDING) << c_->GetJob(id)->reason();
  Drain("a");
  v1::RegisterWorkerRequest r = Registration("b", 1);
  v1::ReportRankStatusRequest* exit = r.add_exited();
  exit->set_job_id(id);
  exit->set_attempt(1);
  exit->set_rank(on_b.rank());
  exit->set_event(v1::ReportRankStatusRequest::EVENT_EXITED);
  exit->set_exit_code(1);
  ASSERT_TRUE(c_->RegisterWorker(r).ok());
  auto job = c_->GetJob(id);
  EXPECT_EQ(job->state(), v1::JOB_STATE_SCHEDULED) << job->reason();
  EXPECT_EQ(job->attempt(), 2);
  for (const v1::Attempt& h : job->history()) {
    EXPECT_THAT(h.reason(), ::testing::Not(HasSubstr("registered again without"))) << "attempt " << h.attempt();
  }
  auto to_b = Drain("b");
  ASSERT_EQ(to_b.size(), 1u);
  EXPECT_EQ(to_b[0].action(), v1::Assignment::ACTION_START);
  EXPECT_EQ(to_b[0].attempt(), 2);
}

TEST_F(CoordinatorTest, RankThatFinishedDuringACoordinatorOutageCountsAsFinished) {
  const std::string a = AddWorker("a", 1);
  auto job = c_->Submit(Spec(1, 1), 0);
  auto placed = Drain(a);
  ASSERT_EQ(placed.size(), 1u);
  Report(a, placed[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  Restart();
  // The worker returns: its rank is no longer running, and it brings the exit it could not report.
  v1::RegisterWorkerRequest r = Registration("a", 1);
  auto* exit = r.add_exited();
  exit->set_job_id(job->id());
  exit->set_attempt(1);
  exit->set_rank(0);
  exit->set_event(v1::ReportRankStatusRequest::EVENT_EXITED);
  exit->set_exit_code(0);
  ASSERT_TRUE(c_->RegisterWorker(r).ok());
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(c_->GetJob(job->id())->attempt(), 1);
}


// Leases and fencing (docs/fault-model.md): a lost worker may only be cut off, its ranks running
// until its lease runs out and gone after its stop grace. Its job gets no new attempt before then.
TEST_F(CoordinatorTest, ALostWorkersJobIsPlacedAgainOnlyAfterItsLeaseAndStopGraceHavePassed) {
  AddWorker("b", 1);
  auto job = c_->Submit(Spec(1, 1), 1);
  ASSERT_TRUE(job.ok()) << job.status();
  auto on_b = Drain("b");
  ASSERT_EQ(on_b.size(), 1u);
  EXPECT_EQ(on_b[0].job_uid(), absl::StrCat(job->id(), "@", job->created_unix_ms())) << "the fencing token's job";
  Report("b", on_b[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  AddWorker("c", 1);
  // b falls silent at t=0: lost after the 200 ms heartbeat timeout; its fence lasts until
  // 0 + lease 100 ms + stop grace 100 ms + stop delay 100 ms (the longest its loop may be held in a
  // call, twice, as b stated) + 1 s slack = 1.3 s.
  AdvanceWithHeartbeats(absl::Milliseconds(250), {"c"});
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_PENDING);
  EXPECT_THAT(c_->GetJob(job->id())->reason(),
              HasSubstr("waiting until lost worker b has surely stopped the ranks of attempt 1 (its lease of 100ms"
                        ", stop grace of 100ms and stop delay of 100ms after its last heartbeat)"));
  AdvanceWithHeartbeats(absl::Milliseconds(1000), {"c"});  // t=1.25 s
  EXPECT_TRUE(Drain("c").empty()) << "c is free, but b's rank may still be running";
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_PENDING);
  AdvanceWithHeartbeats(absl::Milliseconds(100), {"c"});  // t=1.35 s
  auto on_c = Drain("c");
  ASSERT_EQ(on_c.size(), 1u);
  EXPECT_EQ(on_c[0].attempt(), 2);
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_SCHEDULED);
}

TEST_F(CoordinatorTest, ALostWorkerBackWithoutTheRankEndsTheFenceAndOneStillRunningItHoldsTheJob) {
  std::string id;
  v1::Assignment on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnBThenBLost(2, &id, &on_b));
  // b is back before its fence ended, still running the rank (its lease had not run out): the rank is
  // told to stop, and the job waits for it — not for the fence, not on a free c.
  ASSERT_NO_FATAL_FAILURE(RegisterRunning("b", on_b));
  auto stop = Drain("b");
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].action(), v1::Assignment::ACTION_STOP);
  EXPECT_EQ(stop[0].attempt(), 1);
  EXPECT_TRUE(Drain("c").empty());
  EXPECT_THAT(c_->GetJob(id)->reason(), HasSubstr("waiting for worker b to stop its rank(s) of an earlier attempt"));
  // The rank is gone: b's next heartbeat no longer lists it, and the job is placed at once.
  v1::HeartbeatRequest hb;
  hb.set_worker_id("b");
  hb.set_session(sessions_["b"]);
  hb.set_applied_seq(stop[0].seq());
  hb.set_reports_ranks(true);
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  EXPECT_EQ(State(id), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
}

// A live worker that keeps listing a superseded rank it cannot kill (a process stuck in the kernel):
// before, the job waited for it as long as the worker lived. Now, after the unkillable-rank timeout
// (2 min) the job is placed elsewhere, and the rank's device stays out of placement, quarantined with
// a reason, until the worker stops listing the rank.
TEST_F(CoordinatorTest, ARankThatCannotBeStoppedIsGivenUpOnAndItsDeviceQuarantined) {
  std::string id;
  v1::Assignment on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnBThenBLost(2, &id, &on_b));
  ASSERT_NO_FATAL_FAILURE(RegisterRunning("b", on_b));
  auto stop = Drain("b");
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].action(), v1::Assignment::ACTION_STOP);
  v1::HeartbeatRequest hb;  // b's heartbeats: the rank, every time (unchanged: the fast path).
  hb.set_worker_id("b");
  hb.set_session(sessions_["b"]);
  hb.set_applied_seq(stop[0].seq());
  hb.set_reports_ranks(true);
  v1::RunningRank* listed = hb.add_ranks();
  listed->set_job_id(on_b.job_id());
  listed->set_attempt(on_b.attempt());
  listed->set_rank(on_b.rank());
  listed->set_device(on_b.local_rank());
  auto advance = [&](absl::Duration d) {
    for (absl::Duration t = absl::ZeroDuration(); t < d; t += absl::Milliseconds(50)) {
      clock_.Advance(absl::Milliseconds(50));
      ASSERT_TRUE(c_->Heartbeat(hb).ok());
      ASSERT_TRUE(c_->Heartbeat("c").ok());
      c_->CheckLiveness();
    }
  };
  advance(absl::Minutes(2) - absl::Seconds(1));
  EXPECT_EQ(State(id), v1::JOB_STATE_PENDING);
  EXPECT_THAT(c_->GetJob(id)->reason(), HasSubstr("waiting for worker b to stop its rank(s) of an earlier attempt"));
  EXPECT_TRUE(Drain("c").empty());
  advance(absl::Seconds(2));
  auto on_c = Drain("c");
  ASSERT_EQ(on_c.size(), 1u) << c_->GetJob(id)->reason();
  EXPECT_EQ(on_c[0].attempt(), 2);
  auto quarantined = [&] {
    for (const v1::Worker& w : c_->ListWorkers()) {
      if (w.id() == "b") return w;
    }
    return v1::Worker();
  };
  v1::Worker b = quarantined();
  ASSERT_EQ(b.quarantined_size(), 1);
  EXPECT_EQ(b.quarantined(0).device(), 0);
  EXPECT_THAT(b.quarantined(0).reason(), HasSubstr(absl::StrCat("rank 0 of ", id, " attempt 1 could not be stopped for 2m")));
  EXPECT_EQ(b.devices_in_use(), 1) << "the device stays out of placement";
  // The rank is gone at last: the device is free again.
  hb.clear_ranks();
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  b = quarantined();
  EXPECT_EQ(b.quarantined_size(), 0);
  EXPECT_EQ(b.devices_in_use(), 0);
}

TEST_F(CoordinatorTest, AWorkerLostWithTheLeaseDisabledIsNotWaitedFor) {
  // worker_lease 0 (no lease): nothing to wait for, the job is placed again at once (ranks of a cut-off
  // worker may then overlap the next attempt's: documented).
  CoordinatorOptions o;
  o.heartbeat_timeout = absl::Milliseconds(200);
  o.worker_lease = absl::ZeroDuration();
  o.clock = &clock_;
  std::filesystem::remove(db_ + ".nolease");
  auto store = JobStore::Open({db_ + ".nolease"});
  ASSERT_TRUE(store.ok());
  Coordinator c(o, std::move(*store));
  ASSERT_TRUE(c.RegisterWorker(Registration("b", 1)).ok());
  auto job = c.Submit(Spec(1, 1), 1);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(c.WaitForStore().ok());  // The START order leaves once its attempt is durable.
  auto given = c.NextAssignment("b", absl::ZeroDuration());
  ASSERT_TRUE(given.ok() && given->has_value());
  ASSERT_TRUE(c.RegisterWorker(Registration("c", 1)).ok());
  auto no_lease = c.RegisterWorker(Registration("d", 1));
  ASSERT_TRUE(no_lease.ok());
  EXPECT_EQ(no_lease->lease_ms(), 0);
  clock_.Advance(absl::Milliseconds(250));
  ASSERT_TRUE(c.Heartbeat("c").ok());
  ASSERT_TRUE(c.Heartbeat("d").ok());
  c.CheckLiveness();
  EXPECT_EQ(c.GetJob(job->id())->state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(c.GetJob(job->id())->attempt(), 2);
}

// Before: reconciliation skipped jobs that had ended, while the usage counted their ranks not known to
// have exited, so a device stayed "used" until the coordinator restarted.
TEST_F(CoordinatorTest, AFailedJobsRankThatItsWorkersReplacementDoesNotListFreesItsDevice) {
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(/*max_restarts=*/0, &id, &on_a, &on_b));
  Report("b", on_b, v1::ReportRankStatusRequest::EVENT_EXITED, 1);
  ASSERT_EQ(State(id), v1::JOB_STATE_FAILED);
  // a's daemon is SIGKILLed (its rank with it) before it stopped the rank; its replacement registers
  // running nothing.
  auto reg = c_->RegisterWorker(Registration("a", 1));
  ASSERT_TRUE(reg.ok()) << reg.status();
  for (const v1::Worker& w : c_->ListWorkers()) {
    EXPECT_EQ(w.devices_in_use(), 0) << w.name();
  }
  // The same through a heartbeat: the order acknowledged, the rank not listed.
  std::string id2;
  auto job2 = c_->Submit(Spec(2, 1), 0);
  ASSERT_TRUE(job2.ok());
  auto to_a = Drain("a"), to_b = Drain("b");
  ASSERT_EQ(to_a.size(), 1u);
  ASSERT_EQ(to_b.size(), 1u);
  Report("a", to_a[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  Report("b", to_b[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  ASSERT_TRUE(c_->Cancel(job2->id()).ok());
  v1::HeartbeatRequest hb;
  hb.set_worker_id("a");
  hb.set_session(reg->session());
  hb.set_applied_seq(Drain("a").back().seq());  // The stop order: applied, the rank gone unreported.
  hb.set_reports_ranks(true);
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  for (const v1::Worker& w : c_->ListWorkers()) {
    if (w.name() == "a") {
      EXPECT_EQ(w.devices_in_use(), 0);
    }
  }
}

// Before: the overlap check and the insert were two critical sections; two submissions of one
// directory at once could both pass.
TEST_F(CoordinatorTest, ConcurrentSubmissionsOfOneDirectoryAcceptOnlyOne) {
  for (int round = 0; round < 10; ++round) {
    v1::JobSpec spec = Spec(1, 1);
    std::atomic<int> accepted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&] {
        if (c_->Submit(spec, 0).ok()) ++accepted;
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(accepted.load(), 1) << "round " << round;
  }
}

// Before: a rank that exited 0 while the coordinator was down counted as "not reported running" and
// the finished job ran again.
TEST_F(CoordinatorTest, AJobWhoseRanksFinishedDuringACoordinatorOutageSucceedsWithoutAnotherAttempt) {
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(1, &id, &on_a, &on_b));
  Restart();
  for (const v1::Assignment* placed : {&on_a, &on_b}) {
    const std::string worker = placed == &on_a ? "a" : "b";
    v1::RegisterWorkerRequest r = Registration(worker, 1);
    auto* exit = r.add_exited();
    exit->set_job_id(id);
    exit->set_attempt(1);
    exit->set_rank(placed->rank());
    exit->set_event(v1::ReportRankStatusRequest::EVENT_EXITED);
    exit->set_exit_code(0);
    ASSERT_TRUE(c_->RegisterWorker(r).ok());
    c_->CheckLiveness();
    if (placed == &on_a) {
      EXPECT_EQ(State(id), v1::JOB_STATE_RUNNING) << c_->GetJob(id)->reason();
    }
  }
  EXPECT_EQ(State(id), v1::JOB_STATE_SUCCEEDED) << c_->GetJob(id)->reason();
  EXPECT_EQ(c_->GetJob(id)->attempt(), 1);
}

// A worker lost while it still runs (stops) a rank of an earlier attempt: that rank is fenced like the
// current attempt's — before, a lost worker's `stopping` list no longer held the job back.
TEST_F(CoordinatorTest, AWorkerLostWhileStoppingAnEarlierAttemptsRankFencesThatJob) {
  std::string id;
  v1::Assignment on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnBThenBLost(2, &id, &on_b));
  // b is back, still running the rank: told to stop it, the job waits for it.
  ASSERT_NO_FATAL_FAILURE(RegisterRunning("b", on_b));
  ASSERT_THAT(c_->GetJob(id)->reason(), HasSubstr("waiting for worker b to stop"));
  // b falls silent again before the rank is gone: lost, and its stopping rank fenced.
  AdvanceWithHeartbeats(absl::Milliseconds(250), {"c"});
  EXPECT_EQ(State(id), v1::JOB_STATE_PENDING);
  EXPECT_THAT(c_->GetJob(id)->reason(), HasSubstr("waiting until lost worker b has surely stopped"));
  EXPECT_TRUE(Drain("c").empty());
  AdvanceWithHeartbeats(absl::Milliseconds(1100), {"c"});  // Past b's last heartbeat + 1.3 s.
  auto on_c = Drain("c");
  ASSERT_EQ(on_c.size(), 1u);
  EXPECT_EQ(on_c[0].attempt(), 2);
}
}  // namespace
}  // namespace tessera::coordinator
