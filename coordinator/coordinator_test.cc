// The coordinator's state machine without gRPC — jobs, the queue, placement, attempts and restarts,
// history, storage — on a real JobStore (a temp file), workers played by the test
// (coordinator_test_fixture.h). The worker protocol has its own file: coordinator_workers_test.cc.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_test_fixture.h"
#include "coordinator/small_tmpfs.h"
#include "gmock/gmock.h"

namespace tessera::coordinator {
namespace {

using ::testing::HasSubstr;

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
  // The store moves on to the next port of the worker's range (the old one may linger in TIME_WAIT).
  EXPECT_EQ(first[0].store_port(), 30000);
  EXPECT_EQ(second[0].store_port(), 30001);
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

// The time each attempt waited in the queue (the on_scheduled metric): from the submission, and for a
// requeued job from its requeue.
TEST_F(CoordinatorTest, TheWaitInTheQueueCountsFromTheSubmissionOrTheRequeue) {
  const std::string a = AddWorker("a", 1);
  auto first = c_->Submit(Spec(1, 1), 1);
  auto second = c_->Submit(Spec(1, 1), 0);
  ASSERT_EQ(scheduled_waits_, std::vector<absl::Duration>{absl::ZeroDuration()});
  auto placed = Drain(a);
  ASSERT_EQ(placed.size(), 1u);
  clock_.Advance(absl::Seconds(5));
  Report(a, placed[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  Report(a, placed[0], v1::ReportRankStatusRequest::EVENT_EXITED, 1);  // Fails: requeued in front.
  EXPECT_EQ(State(second->id()), v1::JOB_STATE_PENDING) << "the requeued job goes first";
  ASSERT_EQ(State(first->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(scheduled_waits_, (std::vector<absl::Duration>{absl::ZeroDuration(), absl::ZeroDuration()}));
  placed = Drain(a);
  ASSERT_EQ(placed.size(), 1u);
  clock_.Advance(absl::Seconds(3));
  Report(a, placed[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  Report(a, placed[0], v1::ReportRankStatusRequest::EVENT_EXITED, 0);
  EXPECT_EQ(State(second->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(scheduled_waits_,
            (std::vector<absl::Duration>{absl::ZeroDuration(), absl::ZeroDuration(), absl::Seconds(8)}));
}

// A job that has waited longer than the backfill limit is not overtaken any more.
TEST_F(CoordinatorTest, AJobWaitingPastTheBackfillLimitIsNotOvertaken) {
  backfill_limit_ = absl::Milliseconds(50);
  Restart();
  const std::string a = AddWorker("a", 2);
  auto first = c_->Submit(Spec(1, 1), 0);
  auto two = c_->Submit(Spec(2, 1), 0);
  clock_.Advance(absl::Milliseconds(100));
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
  clock_.Advance(absl::Milliseconds(150));
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
  clock_.Advance(absl::Milliseconds(300));
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
  clock_.Advance(absl::Milliseconds(250));
  ASSERT_TRUE(c_->Heartbeat(a).ok());
  c_->CheckLiveness();
  j = *c_->GetJob(id);
  EXPECT_EQ(j.history(0).failed_worker(), "b");
  EXPECT_THAT(j.history(0).reason(), HasSubstr("exited with code 1: error: boom; then worker b was lost"));
  // The next attempt, on a and a new worker c, resumes from the checkpoint of step 20 — once b's
  // lease and stop grace have surely passed (b may only be cut off, its rank still running).
  AddWorker("c", 1);
  EXPECT_EQ(c_->GetJob(id)->history_size(), 1);
  EXPECT_THAT(c_->GetJob(id)->reason(), HasSubstr("waiting until lost worker b has surely stopped"));
  AdvanceWithHeartbeats(absl::Milliseconds(1200), {a, "c"});
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

// A submission is acknowledged only once stored: on a full file system (a 1 MB tmpfs filled up) the
// Submit that cannot be stored fails with a clear error and the job does not exist; every Submit that
// succeeded is still there after a restart.
TEST(CoordinatorStorageTest, SubmissionThatCannotBeStoredFailsAndLeavesNoJob) {
  std::string why_not;
  auto fs = SmallTmpfs::Mount("full_fs", &why_not);
  if (fs == nullptr) GTEST_SKIP() << why_not;
  const std::string db = fs->dir() + "/coord.db";
  auto spec = spec::ParseJobSpec("name: t\ndata: {path: /x.bin}\nmodel: {heads: 4}\n", {});
  ASSERT_TRUE(spec.ok());
  std::set<std::string> accepted;
  std::string refusal;
  absl::StatusCode refusal_code = absl::StatusCode::kOk;
  {
    auto store = JobStore::Open({db});
    ASSERT_TRUE(store.ok()) << store.status();
    Coordinator c(CoordinatorOptions{}, std::move(*store));
    ASSERT_TRUE(c.Recover().ok());
    for (int i = 0; i < 3; ++i) {  // Stored while there is space.
      v1::JobSpec own = *spec;
      own.set_output_dir("out/stored" + std::to_string(i));
      own.mutable_checkpoint()->set_dir("out/stored" + std::to_string(i) + "/checkpoints");
      auto job = c.Submit(own, 0);
      ASSERT_TRUE(job.ok()) << job.status();
      accepted.insert(job->id());
    }
    fs->Fill();
    for (int i = 0; i < 5000 && refusal.empty(); ++i) {
      auto job = c.Submit(*spec, 0);
      if (job.ok()) {
        accepted.insert(job->id());
      } else {
        refusal = std::string(job.status().message());
        refusal_code = job.status().code();
      }
    }
    ASSERT_FALSE(refusal.empty()) << "every submission was stored on a full file system";
    EXPECT_THAT(refusal, HasSubstr("job not accepted: the coordinator could not"));
    EXPECT_EQ(refusal_code, absl::StatusCode::kResourceExhausted) << "a full disk, not an internal error";
    EXPECT_EQ(c.ListJobs().size(), accepted.size()) << "a refused job must not be listed";
    // A transition that cannot be stored fails its RPC (before: answered OK, lost at a restart).
    auto cancel = c.Cancel(*accepted.begin());
    EXPECT_EQ(cancel.status().code(), absl::StatusCode::kResourceExhausted) << cancel.status();
    EXPECT_THAT(cancel.status().message(), HasSubstr("could not store that"));
  }
  fs->Free();
  auto store = JobStore::Open({db});
  ASSERT_TRUE(store.ok()) << store.status();
  Coordinator c(CoordinatorOptions{}, std::move(*store));
  ASSERT_TRUE(c.Recover().ok());
  std::set<std::string> after;
  for (const v1::Job& j : c.ListJobs()) after.insert(j.id());
  EXPECT_EQ(after, accepted);
  auto again = c.Submit(*spec, 0);
  ASSERT_TRUE(again.ok()) << "with space again, submissions are accepted";
  EXPECT_FALSE(accepted.count(again->id())) << again->id() << " was handed out before: the counter was not durable";
}

// A stored job the scheduler cannot handle (here: a world size that wraps to 0 in 32 bits, accepted
// by an older coordinator) fails on recovery with its reason, on every restart; the daemon schedules
// the other jobs.
TEST_F(CoordinatorTest, StoredJobThatCannotBeScheduledFailsOnRecoveryWithItsReason) {
  auto good = c_->Submit(Spec(1, 1), 0);
  ASSERT_TRUE(good.ok());
  v1::Job bad = *good;
  bad.set_id("job-000000");
  for (auto* p : {bad.mutable_spec()->mutable_parallel()}) p->set_dp(262144), p->set_tp(65536), p->set_pp(65536), p->set_sp(65536);
  c_.reset();
  {
    auto store = JobStore::Open({db_});
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Put(bad).ok());
  }
  for (int restart = 0; restart < 2; ++restart) {
    Restart();
    auto job = c_->GetJob("job-000000");
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
    EXPECT_THAT(job->reason(), HasSubstr("the stored spec is not valid: parallel.dp: 262144 exceeds the limit 131072"));
  }
  AddWorker("a", 1);
  EXPECT_EQ(State(good->id()), v1::JOB_STATE_SCHEDULED) << "the valid job is still scheduled";
}

TEST_F(CoordinatorTest, ListJobsPagesNewestFirstWithoutGapsOrRepeats) {
  std::vector<std::string> ids;
  for (int i = 0; i < 7; ++i) ids.push_back(c_->Submit(Spec(1, 1), 0)->id());
  std::reverse(ids.begin(), ids.end());
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    std::string next;
    for (const v1::Job& j : c_->ListJobsPage(3, token, &next)) seen.push_back(j.id());
    token = next;
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(seen, ids);
  EXPECT_EQ(pages, 3);
}

// Before: ids were ordered as strings, so job-1000000 sorted before job-999999 and "newest first"
// listed it last.
TEST_F(CoordinatorTest, JobsPastTheMillionthAreListedNewestFirst) {
  auto first = c_->Submit(Spec(1, 1), 0);
  ASSERT_TRUE(first.ok());
  c_.reset();
  {
    auto store = JobStore::Open({db_});
    ASSERT_TRUE(store.ok());
    for (const char* id : {"job-999999", "job-1000000"}) {
      v1::Job j = *first;
      j.set_id(id);
      j.mutable_spec()->set_output_dir(std::string("out/") + id);
      ASSERT_TRUE((*store)->Put(j).ok());
    }
  }
  Restart();
  std::vector<v1::Job> all = c_->ListJobs();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id(), "job-1000000");
  EXPECT_EQ(all[1].id(), "job-999999");
  std::string next;
  std::vector<v1::Job> page = c_->ListJobsPage(1, "job-1000000", &next);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].id(), "job-999999");
}

// The ranks' warnings (from the worker's progress reports) stay with the job: each once, the newest
// 16, each at most 1 KiB at a character boundary; a report of warnings alone (step 0) changes no
// progress.
TEST_F(CoordinatorTest, WarningsAreKeptWithTheJobEachOnceAndBounded) {
  const std::string a = AddWorker("a", 1);
  auto job = c_->Submit(Spec(1, 1), 1);
  ASSERT_TRUE(job.ok());
  auto placed = Drain(a);
  ASSERT_EQ(placed.size(), 1u);
  Report(a, placed[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  auto report = [&](int64_t step, std::vector<std::string> warnings) {
    v1::ReportRankStatusRequest p;
    p.set_worker_id(a);
    p.set_job_id(job->id());
    p.set_attempt(1);
    p.set_event(v1::ReportRankStatusRequest::EVENT_PROGRESS);
    p.mutable_progress()->set_step(step);
    p.mutable_progress()->set_loss(step > 0 ? 5.0 - step : 0);
    for (auto& w : warnings) p.mutable_progress()->add_warnings(w);
    ASSERT_TRUE(c_->ReportRankStatus(p).ok());
  };
  report(0, {"step_00000004 is damaged"});
  EXPECT_EQ(c_->GetJob(job->id())->progress().step(), 0);
  report(3, {});
  report(0, {"step_00000004 is damaged", "TensorBoard events stop"});
  v1::Job j = *c_->GetJob(job->id());
  EXPECT_EQ(j.progress().step(), 3) << "warnings alone change no progress";
  EXPECT_EQ(j.progress().loss(), 2.0);
  EXPECT_THAT(j.progress().warnings(), ::testing::ElementsAre("step_00000004 is damaged", "TensorBoard events stop"));
  for (int i = 0; i < 20; ++i) report(4 + i, {absl::StrCat("warning ", i)});
  j = *c_->GetJob(job->id());
  ASSERT_EQ(j.progress().warnings_size(), 16);
  EXPECT_EQ(j.progress().warnings(0), "warning 4");
  EXPECT_EQ(j.progress().warnings(15), "warning 19");
  std::string long_text;
  for (int i = 0; i < 1000; ++i) long_text += "\xc3\xa9";  // 2,000 bytes of two-byte characters.
  report(30, {long_text});
  j = *c_->GetJob(job->id());
  EXPECT_EQ(j.progress().warnings(15).size(), 1024u) << "cut at a character boundary";
  // A report of 200,000 warnings (merged pairwise, they held the lock for minutes): its newest 16.
  std::vector<std::string> many;
  for (int i = 0; i < 200000; ++i) many.push_back(absl::StrCat("w", i));
  report(31, many);
  j = *c_->GetJob(job->id());
  EXPECT_EQ(j.progress().warnings(15), "w199999");
  EXPECT_EQ(j.progress().warnings(0), "w199984");
  // No escape sequence reaches a terminal.
  report(32, {"\x1b[31mred\x07"});
  EXPECT_EQ(c_->GetJob(job->id())->progress().warnings(15), "?[31mred?");
}

// Before: nothing watched a running attempt's progress; a hung one-rank job (no collective to time
// out) stayed RUNNING forever.
TEST_F(CoordinatorTest, ARunningAttemptWithoutANewStepForTheProgressTimeoutFailsAndRestarts) {
  const std::string a = AddWorker("a", 1);
  auto job = c_->Submit(Spec(1, 1), 1);
  ASSERT_TRUE(job.ok());
  auto placed = Drain(a);
  ASSERT_EQ(placed.size(), 1u);
  Report(a, placed[0], v1::ReportRankStatusRequest::EVENT_STARTED);
  ASSERT_EQ(State(job->id()), v1::JOB_STATE_RUNNING);
  auto step = [&](int64_t n) {
    v1::ReportRankStatusRequest p;
    p.set_worker_id(a);
    p.set_job_id(job->id());
    p.set_attempt(1);
    p.set_event(v1::ReportRankStatusRequest::EVENT_PROGRESS);
    p.mutable_progress()->set_step(n);
    ASSERT_TRUE(c_->ReportRankStatus(p).ok());
  };
  // Steps every 20 min: never hung (the timeout is 30 min).
  for (int n = 1; n <= 3; ++n) {
    AdvanceWithHeartbeats(absl::Minutes(20), {a});
    step(n);
    EXPECT_EQ(State(job->id()), v1::JOB_STATE_RUNNING);
  }
  // Then nothing for 30 min (heartbeats go on: the worker is fine, its rank is not).
  AdvanceWithHeartbeats(absl::Minutes(29), {a});
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_RUNNING);
  AdvanceWithHeartbeats(absl::Minutes(1) + absl::Milliseconds(100), {a});
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(c_->GetJob(job->id())->reason(), HasSubstr("no training step for 30m (after step 3): hung"));
}

// Before: the log was opened without O_NONBLOCK (a FIFO in its place held the gRPC thread forever)
// and its size taken with ftell, whose −1 on such a file made a string of SIZE_MAX bytes.
TEST_F(CoordinatorTest, LogsRefuseAFifoAtOnceAndClampEveryOffset) {
  v1::JobSpec spec = Spec(1, 1);
  const std::string out = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/logs_fifo";
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out + "/logs");
  spec.set_output_dir(out);
  auto job = c_->Submit(spec, 0);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string log = out + "/logs/rank_0.log";
  ASSERT_EQ(mkfifo(log.c_str(), 0600), 0);
  auto reading = std::async(std::launch::async, [&] { return c_->Logs(job->id(), 0, -10, 100); });
  if (reading.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "Logs blocked on a FIFO";
    const int fd = open(log.c_str(), O_WRONLY);  // Lets it return.
    if (fd >= 0) close(fd);
  }
  absl::StatusOr<v1::GetJobLogsResponse> fifo = reading.get();
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fifo.status().message(), HasSubstr("not a regular file"));
  std::filesystem::remove(log);
  std::ofstream(log) << "hello world";
  auto tail = c_->Logs(job->id(), 0, -5, 100);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_EQ(tail->data(), "world");
  EXPECT_EQ(tail->next_offset(), 11);
  auto all = c_->Logs(job->id(), 0, std::numeric_limits<int64_t>::min(), 100);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->data(), "hello world");
  auto beyond = c_->Logs(job->id(), 0, 1000, 100);
  ASSERT_TRUE(beyond.ok());
  EXPECT_EQ(beyond->data(), "");
  EXPECT_EQ(beyond->next_offset(), 11);
}

// Before: every placement or exit rewrote (and fsynced) the row of every waiting job, whose reason
// names the free devices — under the coordinator's lock.
TEST_F(CoordinatorTest, AnEventDoesNotRewriteEveryWaitingJobsRow) {
  AddWorker("a", 1);
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) {
    auto job = c_->Submit(Spec(2, 1), 0);
    ASSERT_TRUE(job.ok());
    ids.push_back(job->id());
  }
  EXPECT_THAT(c_->GetJob(ids[5])->reason(), HasSubstr("more than the whole cluster's 1"));
  ASSERT_TRUE(c_->WaitForStore().ok());  // Rows are written by the store's thread: count them once done.
  const int64_t before = c_->StoreWrites();
  AddWorker("b", 1);  // The first job is placed; the 19 others wait on, each with a new reason.
  EXPECT_EQ(State(ids[0]), v1::JOB_STATE_SCHEDULED);
  EXPECT_THAT(c_->GetJob(ids[5])->reason(), HasSubstr("waiting for devices"));
  ASSERT_TRUE(c_->WaitForStore().ok());
  EXPECT_LE(c_->StoreWrites() - before, 2) << "the placed job's row (and no waiting job's)";
}

}  // namespace
}  // namespace tessera::coordinator
