// The coordinator's state machine without gRPC: a real JobStore on a temp file, workers played by
// the test through the same calls the worker daemon makes.
#include "coordinator/coordinator.h"

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/spec/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

using ::testing::HasSubstr;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/coord_" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::filesystem::remove(db_);
    Restart();
  }
  void Restart() {
    c_.reset();
    auto store = JobStore::Open({db_});
    ASSERT_TRUE(store.ok());
    CoordinatorOptions o;
    o.heartbeat_timeout = absl::Milliseconds(200);
    o.name_hold = absl::Milliseconds(100);
    o.start_timeout = start_timeout_;
    o.backfill_limit = backfill_limit_;
    c_ = std::make_unique<Coordinator>(o, std::move(*store));
    ASSERT_TRUE(c_->Recover().ok());
  }
  v1::JobSpec Spec(int dp, int tp) {
    auto spec = spec::ParseJobSpec(
        "name: t\ndata: {path: /x.bin}\nmodel: {heads: 4}\ntrain: {micro_batch: 1, global_batch: 4}\n",
        {"parallel.dp=" + std::to_string(dp), "parallel.tp=" + std::to_string(tp)});
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }
  static v1::RegisterWorkerRequest Registration(const std::string& name, int devices) {
    v1::RegisterWorkerRequest r;
    r.set_name(name);
    r.set_device_kind(v1::DEVICE_KIND_CPU);
    r.set_device_count(devices);
    r.set_host("127.0.0.1");
    r.set_store_port_min(30000);
    r.set_store_port_max(30010);
    return r;
  }
  std::string AddWorker(const std::string& name, int devices) {
    auto resp = c_->RegisterWorker(Registration(name, devices));
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp->worker_id();
  }
  std::vector<v1::Assignment> Drain(const std::string& worker) {
    std::vector<v1::Assignment> out;
    while (true) {
      auto a = c_->NextAssignment(worker, absl::ZeroDuration());
      if (!a.ok() || !a->has_value()) return out;
      out.push_back(**a);
    }
  }
  void Report(const std::string& worker, const v1::Assignment& a, v1::ReportRankStatusRequest::Event ev,
              int code = 0) {
    v1::ReportRankStatusRequest r;
    r.set_worker_id(worker);
    r.set_job_id(a.job_id());
    r.set_attempt(a.attempt());
    r.set_rank(a.rank());
    r.set_event(ev);
    r.set_exit_code(code);
    r.set_error("error: boom");
    ASSERT_TRUE(c_->ReportRankStatus(r).ok());
  }
  v1::JobState State(const std::string& id) { return c_->GetJob(id)->state(); }

  // A dp=2 job allowed `max_restarts` placed on new workers "a" and "b" (one device each), both ranks
  // reported STARTED: its id and the two START assignments.
  void RunningOnAAndB(int max_restarts, std::string* id, v1::Assignment* on_a, v1::Assignment* on_b) {
    AddWorker("a", 1);
    AddWorker("b", 1);
    auto job = c_->Submit(Spec(2, 1), max_restarts);
    ASSERT_TRUE(job.ok()) << job.status();
    *id = job->id();
    auto to_a = Drain("a"), to_b = Drain("b");
    ASSERT_EQ(to_a.size(), 1u);
    ASSERT_EQ(to_b.size(), 1u);
    *on_a = to_a[0];
    *on_b = to_b[0];
    Report("a", *on_a, v1::ReportRankStatusRequest::EVENT_STARTED);
    Report("b", *on_b, v1::ReportRankStatusRequest::EVENT_STARTED);
  }
  // `worker` registers again (as after a coordinator restart) listing the rank of `placed` as running.
  void RegisterRunning(const std::string& worker, const v1::Assignment& placed) {
    v1::RegisterWorkerRequest r = Registration(worker, 1);
    auto* running = r.add_running();
    running->set_job_id(placed.job_id());
    running->set_attempt(placed.attempt());
    running->set_rank(placed.rank());
    ASSERT_TRUE(c_->RegisterWorker(r).ok());
  }

  std::string db_;
  std::unique_ptr<Coordinator> c_;
  absl::Duration start_timeout_ = absl::Minutes(2), backfill_limit_ = absl::Minutes(10);
};

TEST_F(CoordinatorTest, JobRunsToSuccessOnTwoWorkersWithTpGroupsKeptTogether) {
  auto job = c_->Submit(Spec(2, 2), 0);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(job->reason(), HasSubstr("needs 4 cpu devices, more than the whole cluster's 0"));
  const std::string a = AddWorker("a", 2), b = AddWorker("b", 2);
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_SCHEDULED);
  auto on_a = Drain(a), on_b = Drain(b);
  ASSERT_EQ(on_a.size(), 2u);
  ASSERT_EQ(on_b.size(), 2u);
  EXPECT_EQ(on_a[0].rank() / 2, on_a[1].rank() / 2) << "a tp group stays on one worker";
  EXPECT_EQ(on_a[0].store_port(), 30000);
  for (auto& x : on_a) Report(a, x, v1::ReportRankStatusRequest::EVENT_STARTED);
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_SCHEDULED);
  for (auto& x : on_b) Report(b, x, v1::ReportRankStatusRequest::EVENT_STARTED);
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_RUNNING);
  for (auto& x : on_a) Report(a, x, v1::ReportRankStatusRequest::EVENT_EXITED);
  for (auto& x : on_b) Report(b, x, v1::ReportRankStatusRequest::EVENT_EXITED);
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_SUCCEEDED);
  for (auto& w : c_->ListWorkers()) EXPECT_EQ(w.devices_in_use(), 0);
}

TEST_F(CoordinatorTest, FailedRankRestartsTheJobThenFailsWhenRestartsRunOut) {
  const std::string a = AddWorker("a", 2);
  auto job = c_->Submit(Spec(2, 1), /*max_restarts=*/1);
  ASSERT_TRUE(job.ok());
  auto first = Drain(a);
  ASSERT_EQ(first.size(), 2u);
  for (auto& x : first) Report(a, x, v1::ReportRankStatusRequest::EVENT_STARTED);
  Report(a, first[1], v1::ReportRankStatusRequest::EVENT_EXITED, 1);
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(c_->GetJob(job->id())->reason(), HasSubstr("rank 1 on worker a exited with code 1: error: boom"));
  auto stop = Drain(a);
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].action(), v1::Assignment::ACTION_STOP);
  Report(a, first[0], v1::ReportRankStatusRequest::EVENT_EXITED, -15);  // Stopped.
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_SCHEDULED);
  auto second = Drain(a);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].attempt(), 2);
  Report(a, second[0], v1::ReportRankStatusRequest::EVENT_EXITED, 1);
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_FAILED);
  EXPECT_THAT(c_->GetJob(job->id())->reason(), HasSubstr("after 1 restarts"));
}

TEST_F(CoordinatorTest, QueueIsFirstComeFirstServedAndCancelFreesDevices) {
  const std::string a = AddWorker("a", 2);
  auto big = c_->Submit(Spec(2, 1), 0);
  auto small = c_->Submit(Spec(1, 1), 0);
  EXPECT_EQ(State(big->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(State(small->id()), v1::JOB_STATE_PENDING);
  auto placed = Drain(a);
  ASSERT_TRUE(c_->Cancel(big->id()).ok());
  EXPECT_EQ(State(big->id()), v1::JOB_STATE_CANCELLED);
  auto stop = Drain(a);
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].action(), v1::Assignment::ACTION_STOP);
  EXPECT_EQ(State(small->id()), v1::JOB_STATE_PENDING) << "devices free only when the ranks are gone";
  for (auto& x : placed) Report(a, x, v1::ReportRankStatusRequest::EVENT_EXITED, -15);
  EXPECT_EQ(State(small->id()), v1::JOB_STATE_SCHEDULED);
}

// Backfill: a job that does not fit lets a later one that fits go first; a job larger than the whole
// cluster says so and blocks nobody; when space frees, the earlier waiting job goes before a later one
// of the same size (first come, first served among equals).
TEST_F(CoordinatorTest, SmallerJobsBackfillAroundOneThatDoesNotFit) {
  const std::string a = AddWorker("a", 2);
  auto first = c_->Submit(Spec(1, 1), 0);  // Takes 1 of 2 devices.
  auto two = c_->Submit(Spec(2, 1), 0);    // Does not fit now.
  auto huge = c_->Submit(Spec(4, 1), 0);   // Can never fit on 2 devices.
  auto one = c_->Submit(Spec(1, 1), 0);    // Fits in the free device: goes before `two`.
  EXPECT_EQ(State(first->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(State(two->id()), v1::JOB_STATE_PENDING);
  EXPECT_THAT(c_->GetJob(two->id())->reason(), HasSubstr("waiting for devices"));
  EXPECT_EQ(State(huge->id()), v1::JOB_STATE_PENDING);
  EXPECT_THAT(c_->GetJob(huge->id())->reason(),
              HasSubstr("needs 4 cpu devices, more than the whole cluster's 2 (live workers)"));
  EXPECT_EQ(State(one->id()), v1::JOB_STATE_SCHEDULED) << c_->GetJob(one->id())->reason();
  auto later1 = c_->Submit(Spec(1, 1), 0), later2 = c_->Submit(Spec(1, 1), 0);
  EXPECT_EQ(State(later1->id()), v1::JOB_STATE_PENDING);
  // One device frees: the earlier of the two equal jobs that fit takes it.
  auto placed = Drain(a);
  ASSERT_EQ(placed.size(), 2u);
  Report(a, placed[0], v1::ReportRankStatusRequest::EVENT_EXITED, 0);
  EXPECT_EQ(State(later1->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(State(later2->id()), v1::JOB_STATE_PENDING);
  EXPECT_EQ(State(two->id()), v1::JOB_STATE_PENDING);
  // A second worker: `two` fits there and goes first; the huge job now only waits for devices.
  AddWorker("b", 2);
  EXPECT_EQ(State(two->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_THAT(c_->GetJob(huge->id())->reason(), HasSubstr("waiting for devices"));
}

// A job that has waited longer than the backfill limit is not overtaken any more.
TEST_F(CoordinatorTest, AJobWaitingPastTheBackfillLimitIsNotOvertaken) {
  backfill_limit_ = absl::Milliseconds(50);
  Restart();
  const std::string a = AddWorker("a", 2);
  auto first = c_->Submit(Spec(1, 1), 0);
  auto two = c_->Submit(Spec(2, 1), 0);
  absl::SleepFor(absl::Milliseconds(100));
  auto one = c_->Submit(Spec(1, 1), 0);
  EXPECT_EQ(State(one->id()), v1::JOB_STATE_PENDING);
  EXPECT_THAT(c_->GetJob(one->id())->reason(), HasSubstr("waiting behind an earlier job"));
  for (auto& x : Drain(a)) Report(a, x, v1::ReportRankStatusRequest::EVENT_EXITED, 0);
  EXPECT_EQ(State(two->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(State(one->id()), v1::JOB_STATE_PENDING);
}

// An attempt whose ranks do not all start in time (here: the assignment to worker b is lost) fails,
// naming the rank and worker, and is placed again.
TEST_F(CoordinatorTest, AttemptNotStartedInTimeIsRetried) {
  start_timeout_ = absl::Milliseconds(100);
  Restart();
  const std::string a = AddWorker("a", 1), b = AddWorker("b", 1);
  auto job = c_->Submit(Spec(2, 1), 1);
  auto on_a = Drain(a);
  Drain(b);  // Lost: b never starts its rank.
  Report(a, on_a[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  c_->CheckLiveness();
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_SCHEDULED) << "within the timeout";
  absl::SleepFor(absl::Milliseconds(150));
  ASSERT_TRUE(c_->Heartbeat(a).ok());
  ASSERT_TRUE(c_->Heartbeat(b).ok());
  c_->CheckLiveness();
  v1::Job j = *c_->GetJob(job->id());
  ASSERT_GE(j.history_size(), 1);
  EXPECT_THAT(j.history(0).reason(), HasSubstr("rank(s) 1 not started within 100ms (first on worker b)"));
  EXPECT_EQ(j.history(0).failed_worker(), "b");
  // a is told to stop its rank; once it has, the job is placed again.
  auto stop = Drain(a);
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].action(), v1::Assignment::ACTION_STOP);
  Report(a, on_a[0], v1::ReportRankStatusRequest::EVENT_EXITED, -15);
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(c_->GetJob(job->id())->attempt(), 2);
  EXPECT_EQ(c_->GetJob(job->id())->restarts_used(), 1);
}

TEST_F(CoordinatorTest, LostWorkerFailsItsAttemptAndInvalidInputIsNamed) {
  const std::string a = AddWorker("a", 1);
  auto job = c_->Submit(Spec(1, 1), 0);
  Drain(a);
  absl::SleepFor(absl::Milliseconds(300));
  c_->CheckLiveness();
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_FAILED);
  EXPECT_THAT(c_->GetJob(job->id())->reason(), HasSubstr("worker a lost"));
  EXPECT_TRUE(absl::IsNotFound(c_->Heartbeat(a)));
  v1::JobSpec bad = Spec(1, 1);
  bad.mutable_parallel()->set_tp(3);
  EXPECT_THAT(c_->Submit(bad, 0).status().message(), HasSubstr("parallel.tp: 3 does not divide model.heads 4"));
  EXPECT_THAT(c_->Submit(Spec(1, 1), -1).status().message(), HasSubstr("max_restarts: -1"));
  v1::JobSpec automatic = Spec(1, 1);
  automatic.mutable_parallel()->set_auto_layout(true);
  EXPECT_THAT(c_->Submit(automatic, 0).status().message(), HasSubstr("parallel: auto is resolved by tessera run"));
  v1::RegisterWorkerRequest r;
  EXPECT_THAT(c_->RegisterWorker(r).status().message(), HasSubstr("name: is required"));
}

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

TEST_F(CoordinatorTest, AnOrderNotAcknowledgedIsSentAgainOnTheWorkersNextStream) {
  auto reg = c_->RegisterWorker(Registration("a", 1));
  ASSERT_TRUE(reg.ok());
  const int64_t session = reg->session();
  ASSERT_TRUE(c_->Submit(Spec(1, 1), 0).ok());
  const int64_t one = c_->StreamOpened("a", session);
  auto given = c_->NextAssignment("a", absl::ZeroDuration(), session, one);
  ASSERT_TRUE(given.ok() && given->has_value());
  EXPECT_EQ((*given)->seq(), 1);
  // The connection broke with the order in flight; the worker opens another stream.
  const int64_t two = c_->StreamOpened("a", session);
  auto old_stream = c_->NextAssignment("a", absl::ZeroDuration(), session, one);
  ASSERT_FALSE(old_stream.ok());
  EXPECT_THAT(old_stream.status().message(), HasSubstr("newer assignment stream"));
  auto again = c_->NextAssignment("a", absl::ZeroDuration(), session, two);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->seq(), 1);
  EXPECT_EQ((*again)->job_id(), (*given)->job_id());
  // Acknowledged: a later stream gets nothing more.
  v1::HeartbeatRequest hb;
  hb.set_worker_id("a");
  hb.set_session(session);
  hb.set_applied_seq(1);
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  const int64_t three = c_->StreamOpened("a", session);
  auto none = c_->NextAssignment("a", absl::ZeroDuration(), session, three);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // An acknowledgement of an order never given is refused, naming the field.
  hb.set_applied_seq(7);
  absl::Status bad = c_->Heartbeat(hb);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("applied_seq: 7"));
}

TEST_F(CoordinatorTest, AHeartbeatWithoutARankWhoseStartIsAcknowledgedFailsTheAttempt) {
  auto ra = c_->RegisterWorker(Registration("a", 1));
  auto rb = c_->RegisterWorker(Registration("b", 1));
  ASSERT_TRUE(ra.ok() && rb.ok());
  auto job = c_->Submit(Spec(2, 1), 1);
  ASSERT_TRUE(job.ok());
  auto on_a = Drain("a"), on_b = Drain("b");
  ASSERT_EQ(on_a.size(), 1u);
  ASSERT_EQ(on_b.size(), 1u);
  Report("a", on_a[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  Report("b", on_b[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  ASSERT_EQ(State(job->id()), v1::JOB_STATE_RUNNING);
  v1::HeartbeatRequest hb;
  hb.set_worker_id("b");
  hb.set_session(rb->session());
  hb.set_reports_ranks(true);
  // b has not acknowledged the start yet: its rank not being listed says nothing.
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_RUNNING);
  // Acknowledged and listed (running, or exited with the report still on its way): fine.
  hb.set_applied_seq(on_b[0].seq());
  auto* listed = hb.add_ranks();
  listed->set_job_id(job->id());
  listed->set_attempt(1);
  listed->set_rank(on_b[0].rank());
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_RUNNING);
  // Without reports_ranks the list is not a claim.
  hb.clear_ranks();
  hb.set_reports_ranks(false);
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_RUNNING);
  // Acknowledged and gone, its exit report lost: the attempt fails, blamed on b, and a's rank stops.
  hb.set_reports_ranks(true);
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  auto after = c_->GetJob(job->id());
  EXPECT_EQ(after->state(), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(after->reason(),
              HasSubstr("worker b no longer has rank " + std::to_string(on_b[0].rank()) + " of attempt 1"));
  ASSERT_GE(after->history_size(), 1);
  EXPECT_EQ(after->history(0).failed_worker(), "b");
  auto stop = Drain("a");
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].action(), v1::Assignment::ACTION_STOP);
  // a's rank stops and reports it: the job is queued again and placed (restarts left: 1).
  Report("a", on_a[0], v1::ReportRankStatusRequest::EVENT_EXITED, -15);
  EXPECT_EQ(c_->GetJob(job->id())->attempt(), 2);
}

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
  absl::SleepFor(absl::Milliseconds(300));  // Past the adoption deadline (the heartbeat timeout)...
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
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(1, &id, &on_a, &on_b));
  Restart();
  ASSERT_NO_FATAL_FAILURE(RegisterRunning(a, on_a));
  Report(a, on_a, v1::ReportRankStatusRequest::EVENT_EXITED, 1);
  EXPECT_EQ(State(id), v1::JOB_STATE_RESTARTING);
  AddWorker("c", 1);
  absl::SleepFor(absl::Milliseconds(450));  // Past the adoption deadline (2 heartbeat timeouts).
  ASSERT_TRUE(c_->Heartbeat("a").ok());
  ASSERT_TRUE(c_->Heartbeat("c").ok());
  c_->CheckLiveness();
  ASSERT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
  std::set<std::string> placed;
  const v1::Job requeued = *c_->GetJob(id);
  for (const auto& p : requeued.placement()) placed.insert(p.worker_id());
  EXPECT_EQ(placed, (std::set<std::string>{"a", "c"}));
  // The new attempt runs as any other: nothing is adopted, so the deadline does not fail it.
  auto next_a = Drain(a), next_c = Drain("c");
  c_->CheckLiveness();  // Before its ranks report: a new attempt has no adoption deadline to miss.
  EXPECT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  ASSERT_FALSE(next_a.empty());
  ASSERT_EQ(next_c.size(), 1u);
  Report(a, next_a.back(), v1::ReportRankStatusRequest::EVENT_STARTED);
  Report("c", next_c[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  absl::SleepFor(absl::Milliseconds(450));
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
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(1, &id, &on_a, &on_b));
  Restart();
  ASSERT_NO_FATAL_FAILURE(RegisterRunning(a, on_a));
  Report(a, on_a, v1::ReportRankStatusRequest::EVENT_EXITED, 1);
  EXPECT_EQ(State(id), v1::JOB_STATE_RESTARTING);
  AddWorker(b, 1);
  ASSERT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  ASSERT_EQ(c_->GetJob(id)->attempt(), 2);
  absl::SleepFor(absl::Milliseconds(450));  // Past the old adoption deadline, the new ranks not started.
  ASSERT_TRUE(c_->Heartbeat(a).ok());
  ASSERT_TRUE(c_->Heartbeat(b).ok());
  c_->CheckLiveness();
  EXPECT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
}

// A job's history: each attempt with its workers, the steps it covered and how it ended. A peer that
// vanished is first seen as a failed collective on a healthy node (whose rank reports the error);
// once the vanished node's worker is found lost, the attempt is blamed on it.
TEST_F(CoordinatorTest, HistoryRecordsEachAttemptAndBlamesTheNodeThatWasLost) {
  const std::string a = "a", b = "b";
  std::string id;
  v1::Assignment on_a, on_b;
  ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(2, &id, &on_a, &on_b));
  v1::ReportRankStatusRequest progress;
  progress.set_worker_id(a);
  progress.set_job_id(id);
  progress.set_attempt(1);
  progress.set_rank(on_a.rank());
  progress.set_event(v1::ReportRankStatusRequest::EVENT_PROGRESS);
  progress.mutable_progress()->set_step(27);
  progress.mutable_progress()->set_last_checkpoint_step(20);
  ASSERT_TRUE(c_->ReportRankStatus(progress).ok());
  Report(a, on_a, v1::ReportRankStatusRequest::EVENT_EXITED, 1);  // "all_reduce failed: ..."
  v1::Job j = *c_->GetJob(id);
  ASSERT_EQ(j.history_size(), 1);
  EXPECT_EQ(j.history(0).outcome(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(j.history(0).failed_worker(), "a");
  EXPECT_EQ(j.history(0).failed_host(), "127.0.0.1");
  EXPECT_EQ(j.history(0).last_step(), 27);
  EXPECT_EQ(j.history(0).resumed_from_step(), 0);
  EXPECT_THAT(j.history(0).workers(), ::testing::UnorderedElementsAre("a", "b"));
  EXPECT_GT(j.history(0).ended_unix_ms(), 0);
  // b falls silent: it is lost, and the failed attempt is blamed on it.
  absl::SleepFor(absl::Milliseconds(250));
  ASSERT_TRUE(c_->Heartbeat(a).ok());
  c_->CheckLiveness();
  j = *c_->GetJob(id);
  EXPECT_EQ(j.history(0).failed_worker(), "b");
  EXPECT_THAT(j.history(0).reason(), HasSubstr("exited with code 1: error: boom; then worker b was lost"));
  // The next attempt, on a and a new worker c, resumes from the checkpoint of step 20.
  AddWorker("c", 1);
  j = *c_->GetJob(id);
  ASSERT_EQ(j.history_size(), 2);
  EXPECT_EQ(j.history(1).attempt(), 2);
  EXPECT_EQ(j.history(1).resumed_from_step(), 20);
  EXPECT_EQ(j.history(1).outcome(), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(j.history(1).ended_unix_ms(), 0);
  EXPECT_THAT(j.history(1).workers(), ::testing::UnorderedElementsAre("a", "c"));
  // It is cancelled: the history says so, and survives a coordinator restart.
  ASSERT_TRUE(c_->Cancel(id).ok());
  Restart();
  j = *c_->GetJob(id);
  ASSERT_EQ(j.history_size(), 2);
  EXPECT_EQ(j.history(1).outcome(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(j.history(0).failed_worker(), "b");
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
  absl::SleepFor(absl::Milliseconds(150));
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
  AddWorker("b", 1);  // No rank running.
  EXPECT_EQ(State(id), v1::JOB_STATE_SCHEDULED) << c_->GetJob(id)->reason();
  EXPECT_EQ(c_->GetJob(id)->attempt(), 2);
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

// A submission is acknowledged only once stored: on a full file system (a 1 MB tmpfs filled up) the
// Submit that cannot be stored fails with a clear error and the job does not exist; every Submit that
// succeeded is still there after a restart.
TEST(CoordinatorStorageTest, SubmissionThatCannotBeStoredFailsAndLeavesNoJob) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a size-limited tmpfs";
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/full_fs";
  std::filesystem::create_directories(dir);
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << strerror(errno);
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { umount2(dir.c_str(), MNT_DETACH); }
  } unmount{dir};
  const std::string db = dir + "/coord.db";
  auto spec = spec::ParseJobSpec("name: t\ndata: {path: /x.bin}\nmodel: {heads: 4}\n", {});
  ASSERT_TRUE(spec.ok());
  std::set<std::string> accepted;
  std::string refusal;
  {
    auto store = JobStore::Open({db});
    ASSERT_TRUE(store.ok()) << store.status();
    Coordinator c(CoordinatorOptions{}, std::move(*store));
    ASSERT_TRUE(c.Recover().ok());
    {  // Fill what is left of the file system.
      std::ofstream filler(dir + "/filler", std::ios::binary);
      const std::string block(4096, 'x');
      while (filler.write(block.data(), block.size())) {
      }
    }
    for (int i = 0; i < 5000 && refusal.empty(); ++i) {
      auto job = c.Submit(*spec, 0);
      if (job.ok()) {
        accepted.insert(job->id());
      } else {
        refusal = std::string(job.status().message());
      }
    }
    ASSERT_FALSE(refusal.empty()) << "every submission was stored on a full file system";
    EXPECT_THAT(refusal, HasSubstr("job not accepted: the coordinator could not"));
    EXPECT_EQ(c.ListJobs().size(), accepted.size()) << "a refused job must not be listed";
  }
  std::filesystem::remove(dir + "/filler");
  auto store = JobStore::Open({db});
  ASSERT_TRUE(store.ok()) << store.status();
  Coordinator c(CoordinatorOptions{}, std::move(*store));
  ASSERT_TRUE(c.Recover().ok());
  std::set<std::string> after;
  for (const v1::Job& j : c.ListJobs()) after.insert(j.id());
  EXPECT_EQ(after, accepted);
  EXPECT_TRUE(c.Submit(*spec, 0).ok()) << "with space again, submissions are accepted";
}

}  // namespace
}  // namespace tessera::coordinator
