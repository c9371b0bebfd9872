// JobEntry alone: the job state machine's table, what a failed attempt becomes, the attempt history
// (its end and a late blame), and the rank counts and missing ranks the coordinator's checks read.
#include "coordinator/job_entry.h"

#include <vector>

#include "gtest/gtest.h"
#include "spec/job_spec.h"

namespace tessera::coordinator {
namespace {

constexpr v1::JobState kNew = v1::JOB_STATE_UNSPECIFIED;
constexpr v1::JobState kPending = v1::JOB_STATE_PENDING;
constexpr v1::JobState kScheduled = v1::JOB_STATE_SCHEDULED;
constexpr v1::JobState kRunning = v1::JOB_STATE_RUNNING;
constexpr v1::JobState kRestarting = v1::JOB_STATE_RESTARTING;
constexpr v1::JobState kSucceeded = v1::JOB_STATE_SUCCEEDED;
constexpr v1::JobState kFailed = v1::JOB_STATE_FAILED;
constexpr v1::JobState kCancelled = v1::JOB_STATE_CANCELLED;
const std::vector<v1::JobState> kAll = {kNew, kPending, kScheduled, kRunning, kRestarting, kSucceeded, kFailed, kCancelled};

TEST(JobEntryTest, TheStateMachineAllowsTheLifecycleAndNothingElse) {
  // Every allowed change but "the same state again" and "cancelled / failed from a live state".
  const std::vector<std::pair<v1::JobState, v1::JobState>> forward = {
      {kNew, kPending},           {kPending, kScheduled},  {kScheduled, kRunning},    {kScheduled, kRestarting},
      {kScheduled, kSucceeded},   {kRunning, kSucceeded},  {kRunning, kRestarting},   {kRestarting, kPending}};
  int allowed = 0;
  for (v1::JobState from : kAll) {
    for (v1::JobState to : kAll) {
      bool expected = false;
      for (const auto& [f, t] : forward) expected |= f == from && t == to;
      if (!IsTerminal(from) && to != kNew && (to == from || to == kCancelled || to == kFailed)) expected = true;
      EXPECT_EQ(JobEntry::Allowed(from, to), expected) << JobStateName(from) << " -> " << JobStateName(to);
      allowed += expected;
    }
  }
  // 8 forward; 4 live states again, cancelled or failed; NEW cancelled or failed (NEW again: no).
  EXPECT_EQ(allowed, 8 + 4 * 3 + 2);
  // A few by name, independent of the rule above.
  EXPECT_FALSE(JobEntry::Allowed(kPending, kRunning)) << "placed before running";
  EXPECT_FALSE(JobEntry::Allowed(kRunning, kPending)) << "a failed attempt restarts first";
  EXPECT_FALSE(JobEntry::Allowed(kRestarting, kScheduled)) << "queued again first";
  EXPECT_FALSE(JobEntry::Allowed(kNew, kNew));
  EXPECT_TRUE(JobEntry::Allowed(kRunning, kCancelled));
  EXPECT_TRUE(JobEntry::Allowed(kRestarting, kFailed));
  for (v1::JobState end : {kSucceeded, kFailed, kCancelled}) {
    for (v1::JobState to : kAll) EXPECT_FALSE(JobEntry::Allowed(end, to)) << "an end is final";
  }
}

TEST(JobEntryTest, TransitionMakesEveryChangeAndCountsTheOnesNotAllowed) {
  JobEntry e;
  e.Transition(kPending, "waiting");
  e.Transition(kPending, "waiting for devices");
  e.Transition(kScheduled, "placed");
  EXPECT_EQ(e.bad_transitions, 0);
  e.Transition(kPending, "back?");  // SCHEDULED -> PENDING skips RESTARTING.
  EXPECT_EQ(e.job.state(), kPending);
  EXPECT_EQ(e.job.reason(), "back?");
  EXPECT_EQ(e.bad_transitions, 1);
  EXPECT_EQ(e.last_bad_transition, "SCHEDULED -> PENDING");
  e.Transition(kCancelled, "cancelled");
  e.Transition(kRunning, "after the end");
  EXPECT_EQ(e.bad_transitions, 2);
  EXPECT_EQ(e.last_bad_transition, "CANCELLED -> RUNNING");
}

TEST(JobEntryTest, AFailedAttemptRestartsWhileRestartsAreLeftThenFails) {
  JobEntry e;
  e.job.set_max_restarts(2);
  e.job.set_attempt(1);
  auto [s1, r1] = e.AfterFailure("rank 0 exited with code 1", /*counts=*/true);
  EXPECT_EQ(s1, kRestarting);
  EXPECT_EQ(r1, "attempt 1 failed: rank 0 exited with code 1; restarting from the newest checkpoint");
  EXPECT_EQ(e.job.restarts_used(), 1);
  EXPECT_EQ(e.AfterFailure("x", true).first, kRestarting);
  EXPECT_EQ(e.job.restarts_used(), 2);
  // Ranks lost to a coordinator restart spend nothing, even with no restart left.
  EXPECT_EQ(e.AfterFailure("x", /*counts=*/false).first, kRestarting);
  EXPECT_EQ(e.job.restarts_used(), 2);
  auto [s3, r3] = e.AfterFailure("hung", true);
  EXPECT_EQ(s3, kFailed);
  EXPECT_EQ(r3, "hung (after 2 restarts)");
  EXPECT_EQ(e.job.restarts_used(), 2);
  JobEntry once;
  EXPECT_EQ(once.AfterFailure("hung", true), std::make_pair(kFailed, std::string("hung")));
}

v1::Attempt* AddAttempt(JobEntry& e, int attempt) {
  e.job.set_attempt(attempt);
  v1::Attempt* h = e.job.add_history();
  h->set_attempt(attempt);
  h->add_workers("w-a");
  h->add_worker_hosts("198.18.0.1");
  h->add_workers("w-b");
  h->add_worker_hosts("198.18.0.2");
  return h;
}

TEST(JobEntryTest, AnAttemptEndsOnceAndNamesTheFailedWorkerAndItsHost) {
  JobEntry e;
  EXPECT_FALSE(e.EndAttempt(kFailed, "x", "w-a", absl::FromUnixSeconds(10))) << "no history yet";
  AddAttempt(e, 1);
  EXPECT_TRUE(e.EndAttempt(kFailed, "rank 1 exited", "w-b", absl::FromUnixSeconds(10)));
  EXPECT_FALSE(e.EndAttempt(kSucceeded, "later", "", absl::FromUnixSeconds(11))) << "closed once";
  const v1::Attempt& h = e.job.history(0);
  EXPECT_EQ(h.outcome(), kFailed);
  EXPECT_EQ(h.reason(), "rank 1 exited");
  EXPECT_EQ(h.failed_worker(), "w-b");
  EXPECT_EQ(h.failed_host(), "198.18.0.2");
  EXPECT_EQ(h.ended_unix_ms(), 10000);
  // The job has moved on to attempt 2 without a history entry for it: nothing to close.
  e.job.set_attempt(2);
  EXPECT_FALSE(e.EndAttempt(kFailed, "y", "", absl::FromUnixSeconds(12)));
}

TEST(JobEntryTest, ALateBlameMovesAFailedAttemptToOneOfItsWorkersWithinTheWindow) {
  JobEntry e;
  AddAttempt(e, 1);
  ASSERT_TRUE(e.EndAttempt(kFailed, "collective failed", "w-a", absl::FromUnixSeconds(100)));
  EXPECT_FALSE(e.Blame("w-c", "was lost", absl::InfinitePast())) << "not a worker of the attempt";
  EXPECT_FALSE(e.Blame("w-a", "was lost", absl::InfinitePast())) << "already blamed";
  EXPECT_FALSE(e.Blame("w-b", "was lost", absl::FromUnixSeconds(101))) << "ended before the window";
  EXPECT_TRUE(e.Blame("w-b", "was lost", absl::FromUnixSeconds(100)));
  EXPECT_EQ(e.job.history(0).failed_worker(), "w-b");
  EXPECT_EQ(e.job.history(0).failed_host(), "198.18.0.2");
  EXPECT_EQ(e.job.history(0).reason(), "collective failed; then worker w-b was lost");
  JobEntry ok;
  AddAttempt(ok, 1);
  ASSERT_TRUE(ok.EndAttempt(kSucceeded, "all ranks finished", "", absl::FromUnixSeconds(100)));
  EXPECT_FALSE(ok.Blame("w-a", "was lost", absl::InfinitePast())) << "only a failed attempt is blamed";
}

TEST(JobEntryTest, RankCountsFollowTheMarksAndNameTheMissingRanks) {
  JobEntry e;
  e.ResetRanks(4);
  for (int r = 0; r < 4; ++r) e.ranks[r].worker_id = r < 2 ? "w-a" : "w-b";
  e.MarkStarted(0);
  e.MarkStarted(0);  // Twice: counted once.
  e.MarkExited(1);   // Exited without a start: lost.
  EXPECT_EQ(e.counts.started, 1);
  EXPECT_EQ(e.counts.exited, 1);
  EXPECT_EQ(e.counts.settled, 2);
  EXPECT_EQ(e.counts.lost, 1);
  EXPECT_FALSE(e.AllSettled());
  EXPECT_EQ(e.NotStarted().ranks, "2,3");
  EXPECT_EQ(e.NotStarted().first_worker, "w-b");
  EXPECT_EQ(e.NotReported().ranks, "1,2,3");
  EXPECT_EQ(e.NotReported().first_worker, "w-a");
  e.MarkFinished(1);  // It finished while the coordinator was away: done, not lost.
  EXPECT_EQ(e.counts.lost, 0);
  EXPECT_EQ(e.NotReported().ranks, "2,3");
  e.MarkStarted(2);
  e.MarkStarted(3);
  EXPECT_TRUE(e.AllSettled());
  EXPECT_FALSE(e.AllStarted());
  EXPECT_TRUE(e.NotStarted().ranks.empty());
  for (int r : {0, 2, 3}) e.MarkExited(r);
  EXPECT_TRUE(e.AllExited());
  e.ResetRanks(2);
  EXPECT_EQ(e.counts, JobEntry::RankCounts{});
  EXPECT_EQ(e.NotStarted().ranks, "0,1");
}

v1::Job StoredJob(v1::JobState state) {
  v1::Job job;
  job.set_id("job-000001");
  job.set_state(state);
  auto spec = spec::ParseJobSpec(R"(
name: tiny
output_dir: /tmp/tessera-job-entry-test
model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32}
data: {path: data.bin, dtype: uint16}
train: {steps: 10, micro_batch: 2, global_batch: 4, lr: 1e-3}
)", {});
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (spec.ok()) *job.mutable_spec() = *spec;
  return job;
}

TEST(JobEntryTest, AStartingCoordinatorAdoptsRequeuesOrFailsEachStoredJob) {
  std::string why;
  ASSERT_EQ(JobEntry::Recover(StoredJob(kPending), &why), JobEntry::AtStart::kQueue) << why;
  EXPECT_EQ(JobEntry::Recover(StoredJob(kScheduled), &why), JobEntry::AtStart::kAdopt);
  EXPECT_EQ(JobEntry::Recover(StoredJob(kRunning), &why), JobEntry::AtStart::kAdopt);
  EXPECT_EQ(JobEntry::Recover(StoredJob(kRestarting), &why), JobEntry::AtStart::kRequeue);
  for (v1::JobState end : {kSucceeded, kFailed, kCancelled}) {
    v1::Job job = StoredJob(end);
    job.clear_spec();  // An ended job is kept as it is, even with a spec no longer accepted.
    EXPECT_EQ(JobEntry::Recover(job, &why), JobEntry::AtStart::kEnded);
  }
  EXPECT_TRUE(why.empty());
  v1::Job bad = StoredJob(kRunning);
  bad.mutable_spec()->mutable_train()->set_steps(-3);
  ASSERT_EQ(JobEntry::Recover(bad, &why), JobEntry::AtStart::kInvalid);
  EXPECT_NE(why.find("the stored spec is not valid: "), std::string::npos) << why;
  EXPECT_NE(why.find("train.steps"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << "one line: " << why;
}

TEST(JobEntryTest, AnAdoptedAttemptCarriesOnWaitsOrFailsAsItsRanksReport) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  JobEntry e;
  e.job.set_state(kRunning);
  e.ResetRanks(3);
  EXPECT_EQ(e.AdoptionAt(t0), JobEntry::Adoption::kNone);
  e.adopt_deadline = t0 + absl::Seconds(20);
  EXPECT_EQ(e.AdoptionAt(t0), JobEntry::Adoption::kWaits);
  e.MarkStarted(0);
  e.MarkExited(1);
  e.MarkFinished(1);  // Finished while the coordinator was away: done, not lost.
  EXPECT_EQ(e.AdoptionAt(t0), JobEntry::Adoption::kWaits);
  EXPECT_EQ(e.AdoptionAt(t0 + absl::Seconds(20)), JobEntry::Adoption::kFails) << "the deadline passed";
  e.MarkStarted(2);
  EXPECT_EQ(e.AdoptionAt(t0 + absl::Seconds(30)), JobEntry::Adoption::kCarriesOn) << "all reported, none lost";
  JobEntry lost;
  lost.job.set_state(kScheduled);
  lost.ResetRanks(2);
  lost.adopt_deadline = t0 + absl::Seconds(20);
  lost.MarkExited(0);  // Exited without having started or finished.
  EXPECT_EQ(lost.AdoptionAt(t0), JobEntry::Adoption::kFails) << "a lost rank fails it before the deadline";
  lost.job.set_state(kRestarting);
  EXPECT_EQ(lost.AdoptionAt(t0), JobEntry::Adoption::kRestarting);
  lost.job.set_state(kCancelled);
  EXPECT_EQ(lost.AdoptionAt(t0), JobEntry::Adoption::kEnded);
}

}  // namespace
}  // namespace tessera::coordinator
