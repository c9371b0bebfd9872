// The coordinator's start: jobs recovered from the store, and the attempts that were running adopted
// until their workers report their ranks again (or are taken for lost).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"

namespace tessera::coordinator {

absl::Status Coordinator::Recover() {
  if (absl::Status s = keys_.Load(); !s.ok()) return s;
  std::vector<std::string> quarantined;
  auto jobs = store_->LoadAll(&quarantined);
  if (!jobs.ok()) return jobs.status();
  for (const std::string& q : quarantined) {
    fprintf(stderr, "tessera-coordinator: ERROR: damaged database row moved to the quarantine table: %s\n",
            q.c_str());
  }
  absl::MutexLock lock(&mu_);
  for (v1::Job& job : *jobs) {
    JobEntry& e = jobs_[job.id()];
    e.job = std::move(job);
    const v1::JobState state = e.job.state();
    std::string invalid;
    switch (JobEntry::Recover(e.job, &invalid)) {
      case JobEntry::AtStart::kEnded:
        continue;
      case JobEntry::AtStart::kInvalid:
        // No stored job may crash or stall the daemon, on this start or any later one.
        e.job.clear_placement();
        e.job.clear_placement_explanation();
        SetStateLocked(e, v1::JOB_STATE_FAILED, invalid);
        fprintf(stderr, "tessera-coordinator: job %s failed on recovery: %s\n", e.job.id().c_str(),
                e.job.reason().c_str());
        continue;
      case JobEntry::AtStart::kAdopt:
        UnindexRanksLocked(e);
        e.ResetRanks(e.job.placement_size());
        for (const v1::RankPlacement& p : e.job.placement()) {
          if (p.rank() >= 0 && p.rank() < e.job.placement_size()) {
            e.ranks[p.rank()].worker_id = p.worker_id();
            e.ranks[p.rank()].local_rank = p.local_rank();
          }
        }
        IndexRanksLocked(e);
        // Workers reconnect with a backoff of up to a few seconds; one that has not come back within
        // two heartbeat timeouts is taken for lost.
        e.adopt_deadline = Now() + 2 * options_.heartbeat_timeout;  // SetStateLocked ends the fast path.
        SetStateLocked(e, state, "coordinator restarted; waiting for the workers to report the ranks");
        continue;
      case JobEntry::AtStart::kRequeue:
        e.requeue_cause = e.job.reason();
        e.job.clear_placement();
        e.job.clear_placement_explanation();
        SetStateLocked(e, v1::JOB_STATE_PENDING, e.requeue_cause);
        break;
      case JobEntry::AtStart::kQueue:
        break;
    }
    queue_.Push(e.job.id(), PoolOf(e.job.spec()), Now(), JobQueue::Where::kBack, PriorityOf(e.job.spec()));  // Its wait counts from this start.
  }
  return absl::OkStatus();
}

void Coordinator::CheckAdoptionLocked(JobEntry& e) {
  switch (e.AdoptionAt(Now())) {
    case JobEntry::Adoption::kNone:
    case JobEntry::Adoption::kWaits:
      return;
    case JobEntry::Adoption::kRestarting:
      // At the deadline its ranks on workers that did not come back (unknown to this coordinator, or
      // lost) are gone, so that the job is queued again instead of waiting for reports that will
      // never come.
      if (Now() >= *e.adopt_deadline) {
        for (size_t r = 0; r < e.ranks.size(); ++r) {
          auto w = workers_.find(e.ranks[r].worker_id);
          if (!e.ranks[r].exited && (w == workers_.end() || w->second.info.state() != v1::Worker::STATE_ALIVE)) {
            // Blame first: the rank's end may place the next attempt at once, and the blame belongs to
            // the attempt that failed (measured: a free node took the job in the same call).
            BlameWorkerLocked(e, e.ranks[r].worker_id, "did not come back after the coordinator restarted",
                              BlameScope::kAdoptedAttempt);
            RankGoneLocked(e, static_cast<int>(r));
          }
        }
      }
      AfterRankExitLocked(e);  // Queued again (and the deadline dropped) once every rank is gone.
      return;
    case JobEntry::Adoption::kEnded:
      EndAdoptionLocked(e);
      return;
    case JobEntry::Adoption::kCarriesOn:
      EndAdoptionLocked(e);
      SetStateLocked(e, v1::JOB_STATE_RUNNING,
                     absl::StrCat("attempt ", e.job.attempt(), " running (carried on through a coordinator restart)"));
      return;
    case JobEntry::Adoption::kFails: {
      EndAdoptionLocked(e);
      const JobEntry::Missing missing = e.NotReported();
      for (size_t r = 0; r < e.ranks.size(); ++r) {
        if (!e.ranks[r].started && !e.ranks[r].finished) RankGoneLocked(e, static_cast<int>(r));
      }
      AttemptFailedLocked(e, absl::StrCat("rank(s) ", missing.ranks, " not reported running after a coordinator restart"),
                          /*counts=*/false, missing.first_worker);
      return;
    }
  }
}

}  // namespace tessera::coordinator
