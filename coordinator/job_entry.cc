#include "coordinator/job_entry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "spec/job_spec.h"

namespace tessera::coordinator {
namespace {

// The address `worker_id` had when the attempt was placed ("" when it was not one of its workers).
std::string HostInAttempt(const v1::Attempt& h, const std::string& worker_id) {
  for (int i = 0; i < h.workers_size() && i < h.worker_hosts_size(); ++i) {
    if (h.workers(i) == worker_id) return h.worker_hosts(i);
  }
  return "";
}

}  // namespace

std::string JobStateName(v1::JobState s) {
  return s == v1::JOB_STATE_UNSPECIFIED ? std::string("NEW") : std::string(v1::JobState_Name(s)).substr(10);
}

bool IsTerminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

bool JobEntry::Allowed(v1::JobState from, v1::JobState to) {
  if (IsTerminal(from) || to == v1::JOB_STATE_UNSPECIFIED) return false;
  // From any other state: again (a new reason), cancelled, or failed (restarts spent; a recovered job
  // whose stored spec is no longer valid).
  if (to == from || to == v1::JOB_STATE_CANCELLED || to == v1::JOB_STATE_FAILED) return true;
  switch (from) {
    case v1::JOB_STATE_UNSPECIFIED:
      return to == v1::JOB_STATE_PENDING;
    case v1::JOB_STATE_PENDING:
      return to == v1::JOB_STATE_SCHEDULED;
    case v1::JOB_STATE_SCHEDULED:
      // Every rank finished before the last one's start was reported: SUCCEEDED at once.
      return to == v1::JOB_STATE_RUNNING || to == v1::JOB_STATE_RESTARTING || to == v1::JOB_STATE_SUCCEEDED;
    case v1::JOB_STATE_RUNNING:
      return to == v1::JOB_STATE_RESTARTING || to == v1::JOB_STATE_SUCCEEDED;
    case v1::JOB_STATE_RESTARTING:
      return to == v1::JOB_STATE_PENDING;
    default:
      return false;
  }
}

void JobEntry::Transition(v1::JobState state, const std::string& reason) {
  if (!Allowed(job.state(), state)) {
    ++bad_transitions;
    last_bad_transition = absl::StrCat(JobStateName(job.state()), " -> ", JobStateName(state));
  }
  job.set_state(state);
  job.set_reason(reason);
}

std::pair<v1::JobState, std::string> JobEntry::AfterFailure(const std::string& reason, bool counts) {
  if (!counts || job.restarts_used() < job.max_restarts()) {
    if (counts) job.set_restarts_used(job.restarts_used() + 1);
    return {v1::JOB_STATE_RESTARTING,
            absl::StrCat("attempt ", job.attempt(), " failed: ", reason, "; restarting from the newest checkpoint")};
  }
  return {v1::JOB_STATE_FAILED,
          absl::StrCat(reason, job.max_restarts() > 0 ? absl::StrCat(" (after ", job.restarts_used(), " restarts)") : "")};
}

bool JobEntry::EndAttempt(v1::JobState outcome, const std::string& reason, const std::string& failed_worker,
                          absl::Time wall_now) {
  if (job.history_size() == 0) return false;
  v1::Attempt& h = *job.mutable_history(job.history_size() - 1);
  if (h.attempt() != job.attempt() || h.ended_unix_ms() != 0) return false;
  h.set_ended_unix_ms(absl::ToUnixMillis(wall_now));
  h.set_outcome(outcome);
  h.set_reason(reason);
  if (!failed_worker.empty()) {
    h.set_failed_worker(failed_worker);
    h.set_failed_host(HostInAttempt(h, failed_worker));
  }
  return true;
}

bool JobEntry::Blame(const std::string& worker_id, const std::string& why, absl::Time not_before) {
  if (job.history_size() == 0) return false;
  v1::Attempt& h = *job.mutable_history(job.history_size() - 1);
  if (h.outcome() != v1::JOB_STATE_FAILED || h.failed_worker() == worker_id ||
      std::find(h.workers().begin(), h.workers().end(), worker_id) == h.workers().end()) {
    return false;
  }
  if (absl::FromUnixMillis(h.ended_unix_ms()) < not_before) return false;
  h.set_failed_worker(worker_id);
  h.set_failed_host(HostInAttempt(h, worker_id));
  h.set_reason(absl::StrCat(h.reason(), "; then worker ", worker_id, " ", why));
  return true;
}

JobEntry::AtStart JobEntry::Recover(const v1::Job& job, std::string* reason) {
  if (IsTerminal(job.state())) return AtStart::kEnded;
  if (absl::Status valid = spec::ToStatus(spec::ValidateJobSpec(job.spec())); !valid.ok()) {
    *reason = absl::StrCat("the stored spec is not valid: ", absl::StrReplaceAll(valid.message(), {{"\n", "; "}}));
    return AtStart::kInvalid;
  }
  switch (job.state()) {
    case v1::JOB_STATE_SCHEDULED:
    case v1::JOB_STATE_RUNNING:
      return AtStart::kAdopt;
    case v1::JOB_STATE_RESTARTING:
      return AtStart::kRequeue;
    default:
      return AtStart::kQueue;
  }
}

JobEntry::Adoption JobEntry::AdoptionAt(absl::Time now) const {
  if (!adopt_deadline) return Adoption::kNone;
  if (job.state() == v1::JOB_STATE_RESTARTING) return Adoption::kRestarting;
  if (job.state() != v1::JOB_STATE_SCHEDULED && job.state() != v1::JOB_STATE_RUNNING) return Adoption::kEnded;
  // A rank that finished while the coordinator was away exited without being reported running: it
  // is done, not lost.
  const bool lost = counts.lost > 0;
  if (AllSettled() && !lost) return Adoption::kCarriesOn;
  if (!lost && now < *adopt_deadline) return Adoption::kWaits;
  return Adoption::kFails;
}

template <typename Pred>
JobEntry::Missing JobEntry::MissingWhere(Pred pred) const {
  Missing m;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!pred(ranks[r])) continue;
    absl::StrAppend(&m.ranks, m.ranks.empty() ? "" : ",", r);
    if (m.first_worker.empty()) m.first_worker = ranks[r].worker_id;
  }
  return m;
}

JobEntry::Missing JobEntry::NotStarted() const {
  return MissingWhere([](const RankEntry& r) { return !r.started && !r.exited; });
}

JobEntry::Missing JobEntry::NotReported() const {
  return MissingWhere([](const RankEntry& r) { return !r.started && !r.finished; });
}

}  // namespace tessera::coordinator
