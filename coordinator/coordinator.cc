#include "coordinator/coordinator.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "spec/job_spec.h"
#include "spec/limits.h"

namespace tessera::coordinator {

Coordinator::Coordinator(CoordinatorOptions options, std::unique_ptr<JobStore> store)
    : options_(options),
      store_(std::move(store)),
      keys_(WorkerKeysOptions{store_.get(), options_.clock, options_.on_transition}),
      queue_(JobQueueOptions{options_.backfill_limit}),
      liveness_(WorkerLiveness::Options{options_.heartbeat_timeout, options_.worker_lease, options_.clock,
                                        options_.before_fast_beat_for_test}) {
  StoreWriterOptions w;
  w.store = store_.get();
  w.on_durable = [this] { OnStoreDurable(); };
  writer_ = std::make_unique<StoreWriter>(std::move(w));
}

Coordinator::~Coordinator() {
  writer_->Stop();  // Its thread stores what is queued and calls OnStoreDurable: before anything goes.
}

void Coordinator::OnStoreDurable() {
  absl::MutexLock lock(&mu_);
  const uint64_t durable = writer_->durable();
  for (auto it = held_workers_.begin(); it != held_workers_.end();) {
    auto w = workers_.find(*it);
    if (w == workers_.end()) {
      it = held_workers_.erase(it);
      continue;
    }
    w->second.orders.Flush(durable);
    it = w->second.orders.HeldBeyond(durable) ? std::next(it) : held_workers_.erase(it);
  }
  changed_.SignalAll();  // Pulling streams (NextAssignment) wait for held orders.
}

absl::Status Coordinator::WaitForStore(absl::Duration timeout) {
  uint64_t ticket = writer_->last_ticket();
  return writer_->Wait(ticket, timeout);
}

void Coordinator::CheckStartLocked(JobEntry& e) {
  if (e.adopt_deadline || e.job.state() != v1::JOB_STATE_SCHEDULED ||
      Now() - e.scheduled_at <= options_.start_timeout) {
    return;
  }
  const JobEntry::Missing missing = e.NotStarted();
  if (missing.ranks.empty()) return;
  AttemptFailedLocked(e, absl::StrCat("rank(s) ", missing.ranks, " not started within ",
                                      absl::FormatDuration(options_.start_timeout), " (first on worker ",
                                      missing.first_worker, ")"),
                      /*counts=*/true, missing.first_worker);
  // Their workers were told to stop them (should they start after all); they count as gone now, as
  // an assignment that was lost would never report an exit.
  for (size_t r = 0; r < e.ranks.size(); ++r) {
    if (!e.ranks[r].started) RankGoneLocked(e, static_cast<int>(r));
  }
  AfterRankExitLocked(e);
}

void Coordinator::CheckProgressLocked(JobEntry& e) {
  if (e.adopt_deadline || e.job.state() != v1::JOB_STATE_RUNNING || options_.progress_timeout <= absl::ZeroDuration()) {
    return;
  }
  if (e.progressed_at == absl::InfinitePast()) e.progressed_at = Now();  // Adopted, or running before this start.
  if (Now() - e.progressed_at <= options_.progress_timeout) return;
  AttemptFailedLocked(e, absl::StrCat("no training step for ", absl::FormatDuration(options_.progress_timeout),
                                      " (after step ", e.job.progress().step(), "): hung; its ranks are stopped"),
                      /*counts=*/true);
}

void Coordinator::ChangedLocked(JobEntry& e, bool persist) {
  e.version = ++version_counter_;
  e.job.set_updated_unix_ms(absl::ToUnixMillis(WallNow()));
  if (persist || Now() - e.last_persist > absl::Seconds(2)) {
    e.ticket = writer_->Put(e.job);  // Stored off the lock; a failed write is logged and tried again.
    e.last_persist = Now();
  }
  changed_.SignalAll();
}

void Coordinator::WaitingLocked(JobEntry& e, const std::string& reason) {
  if (e.job.state() != v1::JOB_STATE_PENDING) {
    SetStateLocked(e, v1::JOB_STATE_PENDING, reason);
    return;
  }
  if (e.job.reason() == reason) return;
  e.job.set_reason(reason);
  e.version = ++version_counter_;  // Watchers see it; the store does not.
  changed_.SignalAll();
}

int64_t Coordinator::StoreWrites() { return store_->writes(); }

void Coordinator::SetStateLocked(JobEntry& e, v1::JobState state, const std::string& reason) {
  // Every placement, attempt and end comes with a state change; progress (checkpoints, steps), which
  // reconciliation does not read, does not end the heartbeats' fast path.
  RanksChangedLocked();
  if (options_.on_transition && (state != e.job.state() || reason != e.job.reason())) {
    options_.on_transition(absl::StrCat(e.job.id(), " (", e.job.spec().name(), ") ",
                                        state != e.job.state() ? absl::StrCat(JobStateName(e.job.state()), " -> ") : "",
                                        JobStateName(state), reason.empty() ? "" : ": ",
                                        reason.size() > 2000 ? reason.substr(0, 2000) + "…" : reason));
  }
  e.Transition(state, reason);
  ChangedLocked(e, /*persist=*/true);
}

absl::StatusOr<v1::Job> Coordinator::Submit(const v1::JobSpec& spec, int max_restarts, const std::string& owner) {
  std::vector<spec::SpecError> errors = spec::ValidateJobSpec(spec);
  if (spec.ByteSizeLong() > spec::limits::kMaxSpecBytes) {
    errors.push_back({"spec", absl::StrCat(spec.ByteSizeLong(), " bytes encoded, more than the limit ", spec::limits::kMaxSpecBytes)});
  }
  if (max_restarts < 0 || max_restarts > options_.max_restarts_limit) {
    errors.push_back({"max_restarts", absl::StrCat(max_restarts, " must be between 0 and ", options_.max_restarts_limit)});
  }
  if (spec.parallel().auto_layout()) {
    errors.push_back({"parallel", "auto is resolved by tessera run; for a cluster job choose the layout with "
                                  "tessera plan SPEC --devices N and set it"});
  }
  std::vector<spec::SpecError> paths = spec::ConfineJobPaths(spec, options_.roots, owner);
  errors.insert(errors.end(), paths.begin(), paths.end());
  if (absl::Status s = spec::ToStatus(errors); !s.ok()) return s;
  if (options_.policy.from_file) {
    if (absl::Status s = options_.policy.CheckPriority(owner, PriorityOf(spec)); !s.ok()) return s;
  }
  // One submission at a time from the overlap check until the job is in jobs_: two concurrent
  // submissions of one directory would both pass the check.
  absl::MutexLock submitting(&submit_mu_);
  {
    // Two live jobs never write into the same directory (or one into the other's): their checkpoints
    // and logs would mix. A job that ended keeps its directories while ranks of it may still be alive
    // (a lost worker's, a rank being stopped).
    absl::MutexLock lock(&mu_);
    const std::map<std::string, std::string> stopping_jobs = StoppingJobsLocked();
    for (const auto& [field, path] : spec::OutputPaths(spec)) {
      for (const auto& [other_id, other] : jobs_) {
        if (IsTerminal(other.job.state()) && !RanksMayLiveLocked(other, stopping_jobs)) continue;
        for (const auto& [other_field, other_path] : spec::OutputPaths(other.job.spec())) {
          if (spec::PathWithin(path, other_path) || spec::PathWithin(other_path, path)) {
            errors.push_back({field, absl::StrCat(spec::Quote(path, 64), " overlaps the ", other_field, " of live job ",
                                                  other_id, "; give this job a directory of its own")});
            break;
          }
        }
        if (errors.size() > 8) break;
      }
    }
  }
  if (absl::Status s = spec::ToStatus(errors); !s.ok()) return s;
  auto id = store_->NextJobId();
  if (!id.ok()) {
    return absl::Status(id.status().code(), absl::StrCat("job not accepted: the coordinator could not allocate its id: ",
                                                         id.status().message()));
  }
  v1::Job job;
  job.set_id(*id);
  *job.mutable_spec() = spec;
  job.set_max_restarts(max_restarts);
  job.set_owner(owner);
  job.set_created_unix_ms(absl::ToUnixMillis(WallNow()));
  job.set_updated_unix_ms(job.created_unix_ms());
  job.mutable_progress()->set_total_steps(spec.train().steps());
  job.set_state(v1::JOB_STATE_PENDING);
  job.set_reason("waiting to be scheduled");
  // The submission is acknowledged only once it is durable: a write that fails fails the RPC, and the
  // job does not exist.
  if (absl::Status s = store_->Put(job); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("job not accepted: the coordinator could not store it: ", s.message()));
  }
  absl::MutexLock lock(&mu_);
  JobEntry& e = jobs_[*id];
  e.job = std::move(job);
  e.last_persist = Now();
  ChangedLocked(e, /*persist=*/false);
  if (options_.on_transition) {
    options_.on_transition(absl::StrCat(*id, " (", spec.name(), ") submitted", owner.empty() ? "" : " by " + owner,
                                        ": ", spec::WorldSize(spec), " ranks, pool ", PoolOf(spec).second,
                                        ", max_restarts ", max_restarts));
  }
  queue_.Push(*id, PoolOf(e.job.spec()), e.last_persist, JobQueue::Where::kBack, PriorityOf(e.job.spec()));
  TryScheduleLocked();
  return e.job;
}


absl::StatusOr<std::string> Coordinator::JobOutputPath(const std::string& id, const std::string& relative) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " does not exist"));
  // Derived from the job's own, validated output_dir: never a path from a request.
  std::string path = absl::StrCat(it->second.job.spec().output_dir(), "/", relative);
  if (!options_.roots.output.empty()) {
    v1::JobSpec only_this;
    only_this.set_output_dir(path);
    if (!spec::ConfineJobPaths(only_this, options_.roots, it->second.job.owner()).empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the output of ", id, " is outside the coordinator's --output_root; it is not served"));
    }
  }
  return path;
}

absl::StatusOr<v1::GetJobLogsResponse> Coordinator::Logs(const std::string& id, int rank, int64_t offset,
                                                         int max_bytes) {
  auto job = GetJob(id);
  if (!job.ok()) return job.status();
  if (const int64_t world = spec::WorldSize(job->spec()); rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank: ", rank, " is not a rank of ", id, " (0..", world - 1, ")"));
  }
  const auto found = JobOutputPath(id, absl::StrCat("logs/rank_", rank, ".log"));
  if (!found.ok()) return found.status();
  const std::string& path = *found;
  v1::GetJobLogsResponse resp;
  resp.set_path(path);
  // O_NOFOLLOW: the log file itself is never a symbolic link (a rank writes a regular file).
  // O_NONBLOCK: opening a FIFO put in its place returns at once instead of holding this thread
  // until a writer comes; anything but a regular file is then refused.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    resp.set_next_offset(std::max<int64_t>(0, offset));
    return resp;  // Not written yet.
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file; not read"));
  }
  // The size is the file's at this moment; offsets are clamped to it (a negative one counts from it).
  const int64_t size = st.st_size;
  const int64_t start = offset < 0 ? std::max<int64_t>(0, size + offset) : std::min(offset, size);  // No overflow: size ≥ 0.
  const int cap = max_bytes <= 0 ? 64 << 10 : std::min(max_bytes, 1 << 20);
  std::string data(static_cast<size_t>(std::clamp<int64_t>(size - start, 0, cap)), '\0');
  const ssize_t n = data.empty() ? 0 : pread(fd, data.data(), data.size(), start);
  close(fd);
  data.resize(n < 0 ? 0 : static_cast<size_t>(n));
  resp.set_next_offset(start + static_cast<int64_t>(n));
  resp.set_data(std::move(data));
  return resp;
}

absl::StatusOr<v1::Job> Coordinator::GetJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " does not exist"));
  return it->second.job;
}

std::vector<v1::Job> Coordinator::ListJobsPage(int page_size, const std::string& after, std::string* next,
                                               const std::string* owner) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> out;
  next->clear();
  // Newest first is the map's reverse order; a page continues strictly before `after`.
  // A page also ends after kPageBytes of jobs, so that a response stays far below the message limit.
  constexpr size_t kPageBytes = 4 << 20;
  size_t bytes = 0;
  auto it = after.empty() ? jobs_.end() : jobs_.lower_bound(after);
  while (it != jobs_.begin()) {
    --it;
    if (owner != nullptr && it->second.job.owner() != *owner) continue;
    if (static_cast<int>(out.size()) == page_size || bytes >= kPageBytes) {
      *next = out.back().id();
      break;
    }
    out.push_back(it->second.job);
    bytes += out.back().ByteSizeLong();
  }
  return out;
}

std::vector<v1::Job> Coordinator::ListJobs() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> out;
  for (auto& [id, e] : jobs_) out.push_back(e.job);
  std::reverse(out.begin(), out.end());  // Ids grow with time.
  return out;
}

absl::StatusOr<std::pair<v1::Job, uint64_t>> Coordinator::WaitForJobChange(const std::string& id, uint64_t seen,
                                                                          absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;  // A blocking wait: real time.
  while (true) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " does not exist"));
    if (it->second.version > seen || absl::Now() >= deadline) return std::make_pair(it->second.job, it->second.version);
    changed_.WaitWithDeadline(&mu_, deadline);
  }
}

absl::StatusOr<v1::Job> Coordinator::Cancel(const std::string& id) {
  v1::Job job;
  uint64_t ticket = 0;
  bool ended_before = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " does not exist"));
    JobEntry& e = it->second;
    // An ended job is answered as it is, once its end is durable (a cancel whose write failed is
    // retried by the writer; asking again reports whether it is stored now).
    ended_before = IsTerminal(e.job.state());
    if (!ended_before) {
      queue_.Remove(id);
      StopRanksLocked(e);
      EndAttemptLocked(e, v1::JOB_STATE_CANCELLED, "cancelled by the user", "");
      SetStateLocked(e, v1::JOB_STATE_CANCELLED, "cancelled by the user");
      TryScheduleLocked();
    }
    job = e.job;
    ticket = e.ticket;
  }
  // Acknowledged once durable (off the lock: the writer commits it with whatever else is queued).
  if (absl::Status stored = writer_->Wait(ticket, kClientWriteWait); !stored.ok()) {
    if (ended_before) {
      return absl::Status(stored.code(), absl::StrCat(id, " has ended (", v1::JobState_Name(job.state()),
                                                      "), but the coordinator could not store that yet (",
                                                      stored.message(), "); it keeps trying"));
    }
    // Its ranks are stopped and it is cancelled here, but a coordinator restarted now would not know.
    return absl::Status(stored.code(), absl::StrCat(id, " was cancelled, but the coordinator could not store that (",
                                                    stored.message(), "): cancel it again once it can"));
  }
  return job;
}

void Coordinator::StopRanksLocked(JobEntry& e) {
  std::set<std::string> notified;
  for (const RankEntry& r : e.ranks) {
    if (r.exited || notified.count(r.worker_id)) continue;
    auto w = workers_.find(r.worker_id);
    if (w == workers_.end()) continue;
    v1::Assignment a;
    a.set_action(v1::Assignment::ACTION_STOP);
    a.set_job_id(e.job.id());
    a.set_attempt(e.job.attempt());
    SendLocked(w->second, std::move(a));
    notified.insert(r.worker_id);
  }
  changed_.SignalAll();
}

void Coordinator::RankGoneLocked(JobEntry& e, int rank) {
  RankEntry& r = e.ranks[rank];
  if (r.exited) return;
  e.MarkExited(rank);
  RanksChangedLocked();
  auto w = workers_.find(r.worker_id);
  if (w == workers_.end()) return;
  // A superseded rank still there holds the device.
  if (!w->second.stopping.UsesDevice(r.local_rank)) w->second.used_devices.erase(r.local_rank);
  ReindexLocked(w->second);
  if (rank == 0) w->second.used_ports.erase(e.job.store_port());
}

void Coordinator::EndAttemptLocked(JobEntry& e, v1::JobState outcome, const std::string& reason,
                                   const std::string& failed_worker) {
  e.EndAttempt(outcome, reason, failed_worker, WallNow());
}

void Coordinator::BlameWorkerLocked(JobEntry& e, const std::string& worker_id, const std::string& why,
                                    BlameScope scope) {
  // An adopted attempt may have ended (by a surviving worker's report) up to the whole adoption window
  // before its deadline names the worker that never came back: a time window would race that deadline.
  const absl::Time not_before = scope == BlameScope::kRecentFailure ? WallNow() - 2 * options_.heartbeat_timeout
                                                                    : absl::InfinitePast();
  if (e.Blame(worker_id, why, not_before)) ChangedLocked(e, /*persist=*/true);
}

void Coordinator::AttemptFailedLocked(JobEntry& e, const std::string& reason, bool counts,
                                      const std::string& failed_worker) {
  EndAttemptLocked(e, v1::JOB_STATE_FAILED, reason, failed_worker);
  StopRanksLocked(e);
  // An attempt being adopted keeps its deadline: CheckAdoptionLocked then clears ranks whose workers
  // never came back.
  const auto [state, why] = e.AfterFailure(reason, counts);
  SetStateLocked(e, state, why);
  AfterRankExitLocked(e);
}

// Moves a RESTARTING job back to the queue once every rank of its attempt is gone.
void Coordinator::AfterRankExitLocked(JobEntry& e) {
  const bool all_gone = e.AllExited();
  if (all_gone && e.job.state() == v1::JOB_STATE_RESTARTING) {
    EndAdoptionLocked(e);  // The next attempt is not adopted.
    e.job.clear_placement();
    e.job.clear_placement_explanation();
    e.requeue_cause = e.job.reason();
    queue_.Push(e.job.id(), PoolOf(e.job.spec()), Now(), JobQueue::Where::kFront, PriorityOf(e.job.spec()));
    SetStateLocked(e, v1::JOB_STATE_PENDING, absl::StrCat(e.requeue_cause, "; waiting for devices"));
  }
  TryScheduleLocked();
}

std::map<v1::JobState, int> Coordinator::JobsByState() {
  absl::MutexLock lock(&mu_);
  std::map<v1::JobState, int> out;
  for (auto& [id, e] : jobs_) ++out[e.job.state()];
  return out;
}

}  // namespace tessera::coordinator
