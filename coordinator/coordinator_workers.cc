// The worker-facing half of Coordinator: registration (and adoption of running ranks after a
// coordinator restart), assignment queues, rank status reports. Heartbeats and liveness:
// coordinator_heartbeats.cc.
#include <algorithm>
#include <cctype>
#include <limits>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "spec/job_spec.h"
#include "coordinator/coordinator.h"

namespace tessera::coordinator {

std::vector<v1::Worker> Coordinator::ListWorkers() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Worker> out;
  for (auto& [id, w] : workers_) {
    v1::Worker info = w.info;
    info.set_devices_in_use(static_cast<int>(w.used_devices.size()));
    info.set_last_heartbeat_unix_ms(absl::ToUnixMillis(options_.clock->ToWall(w.live->LastHeartbeat())));
    for (const StoppingRanks::Quarantined& x : w.stopping.quarantined()) {
      v1::DeviceQuarantine* q = info.add_quarantined();
      q->set_device(x.device);
      q->set_reason(x.reason);
    }
    out.push_back(std::move(info));
  }
  return out;
}

namespace {

// A registration's fields as this coordinator can use them; InvalidArgument naming each bad field.
absl::Status RegistrationProblems(const v1::RegisterWorkerRequest& req) {
  std::vector<spec::SpecError> errors;
  if (std::string problem = spec::NameProblem(req.name()); !problem.empty()) errors.push_back({"name", problem});
  if (std::string problem = spec::NameProblem(req.pool()); !req.pool().empty() && !problem.empty()) {
    errors.push_back({"pool", problem});
  }
  if (req.labels_size() > 64) errors.push_back({"labels", absl::StrCat(req.labels_size(), " labels; at most 64")});
  for (const auto& [key, value] : req.labels()) {
    if (std::string problem = spec::NameProblem(key); !problem.empty()) {
      errors.push_back({"labels", absl::StrCat("key ", problem)});
    } else if (value.size() > 256) {
      errors.push_back({absl::StrCat("labels.", key), "is longer than 256 characters"});
    }
  }
  if (req.device_kind() != v1::DEVICE_KIND_CPU && req.device_kind() != v1::DEVICE_KIND_CUDA) {
    errors.push_back({"device_kind", "must be cpu or cuda"});
  }
  if (req.device_count() < 1 || req.device_count() > 1024) {
    errors.push_back({"device_count", absl::StrCat(req.device_count(), " must be between 1 and 1024")});
  }
  if (req.host().empty()) errors.push_back({"host", "is required"});
  // NaN fails both comparisons: refused too. 1e21 FLOP/s is far beyond any device.
  if (!(req.peak_flops_per_device() >= 0 && req.peak_flops_per_device() <= 1e21)) {
    errors.push_back({"peak_flops_per_device", absl::StrCat(req.peak_flops_per_device(), " is not between 0 and 1e21")});
  }
  // A worker's stated stop grace and delay lengthen its jobs' fences: at most an hour each.
  if (req.stop_grace_ms() < 0 || req.stop_grace_ms() > 3600000) {
    errors.push_back({"stop_grace_ms", absl::StrCat(req.stop_grace_ms(), " is not between 0 and 3600000")});
  }
  if (req.stop_delay_ms() < 0 || req.stop_delay_ms() > 3600000) {
    errors.push_back({"stop_delay_ms", absl::StrCat(req.stop_delay_ms(), " is not between 0 and 3600000")});
  }
  if (req.store_port_min() < 1 || req.store_port_max() > 65535 || req.store_port_min() > req.store_port_max()) {
    errors.push_back({"store_port_min", absl::StrCat("[", req.store_port_min(), ", ", req.store_port_max(),
                                                     "] is not a port range")});
  }
  return spec::ToStatus(errors);
}

// A job keeps its newest 16 warnings, each at most 1 KiB (a worker's report is not trusted to be small).
constexpr int kMaxJobWarnings = 16;
constexpr size_t kMaxWarningBytes = 1024;

// Sets p's warnings to old's followed by p's (a report's new ones) not among them, cut to the limits.
// True when one was new.
bool MergeWarnings(const v1::JobProgress& old, v1::JobProgress* p) {
  std::vector<std::string> merged(old.warnings().begin(), old.warnings().end());
  bool added = false;
  // Only the report's newest kMaxJobWarnings count (a report is not trusted to be small: merging
  // each of a huge list against the others would hold the lock for minutes).
  const int first = std::max(0, p->warnings_size() - kMaxJobWarnings);
  for (int i = first; i < p->warnings_size(); ++i) {
    const std::string& w = p->warnings(i);
    size_t end = std::min(w.size(), kMaxWarningBytes);
    // At a character boundary (a proto3 string is UTF-8): back over continuation bytes (10xxxxxx).
    while (end < w.size() && end > 0 && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80) --end;
    std::string cut = w.substr(0, end);
    // Shown on people's terminals (tessera job, follow): no control characters (escape sequences).
    for (char& c : cut) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    if (std::find(merged.begin(), merged.end(), cut) != merged.end()) continue;
    merged.push_back(std::move(cut));
    added = true;
  }
  const size_t drop = merged.size() > kMaxJobWarnings ? merged.size() - kMaxJobWarnings : 0;
  p->clear_warnings();
  for (size_t i = drop; i < merged.size(); ++i) p->add_warnings(std::move(merged[i]));
  return added;
}

}  // namespace

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(const v1::RegisterWorkerRequest& req) {
  if (absl::Status s = RegistrationProblems(req); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const std::string id = req.name();  // Stable across coordinator restarts, so placements stay valid.
  if (absl::Status s = RefusedRegistrationLocked(req); !s.ok()) return s;
  WorkerEntry& w = AcceptWorkerLocked(req);
  defer_scheduling_ = true;  // Until the reconciliation below is done (TryScheduleLocked at the end).
  ApplyListedRanksLocked(w, req);
  ReconcileRegistrationLocked(id, req);
  defer_scheduling_ = false;
  // Other workers' usage changes only through the ranks' own bookkeeping (RankGoneLocked, placement):
  // recounting every worker at each of 12,500 registrations took 22 s in all.
  RefreshWorkerUsageLocked(&id);
  for (auto& [jid, e] : jobs_) CheckAdoptionLocked(e);
  TryScheduleLocked();
  changed_.SignalAll();
  v1::RegisterWorkerResponse resp;
  resp.set_worker_id(id);
  resp.set_heartbeat_interval_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  resp.set_session(w.session);
  resp.set_lease_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(options_.worker_lease)));
  return resp;
}

absl::Status Coordinator::RefusedRegistrationLocked(const v1::RegisterWorkerRequest& req) {
  const std::string& id = req.name();
  if (auto held = workers_.find(id); held != workers_.end() && !req.instance().empty() &&
                                     !held->second.instance.empty() && held->second.instance != req.instance() &&
                                     held->second.info.state() == v1::Worker::STATE_ALIVE &&
                                     liveness_.SinceBeat(*held->second.live) < options_.name_hold) {
    return absl::AlreadyExistsError(absl::StrCat(
        "worker name ", id, " is in use by a live worker at ", held->second.info.host(), " (last heartbeat ",
        absl::FormatDuration(absl::Trunc(liveness_.SinceBeat(*held->second.live), absl::Milliseconds(1))),
        " ago): give this worker another --name (a restarted worker is accepted once its predecessor has been "
        "silent for ", absl::FormatDuration(options_.name_hold), ")"));
  }
  if (auto same = workers_.find(id); same != workers_.end() && !req.instance().empty() &&
                                     same->second.instance == req.instance() && req.attempt() > 0 &&
                                     req.attempt() <= same->second.attempt) {
    return absl::AbortedError(absl::StrCat("registration ", req.attempt(), " of worker ", id,
                                           " arrived after its registration ", same->second.attempt,
                                           " was accepted; ignored"));
  }
  return absl::OkStatus();
}

Coordinator::WorkerEntry& Coordinator::AcceptWorkerLocked(const v1::RegisterWorkerRequest& req) {
  const std::string& id = req.name();
  WorkerEntry& w = workers_[id];
  IndexStoppingLocked(w, /*add=*/false);
  w.instance = req.instance();
  w.attempt = req.attempt();
  w.info.set_id(id);
  w.info.set_name(req.name());
  w.info.set_device_kind(req.device_kind());
  w.info.set_device_count(req.device_count());
  w.info.set_device_memory_bytes(req.device_memory_bytes());
  w.info.set_host(req.host());
  w.info.set_metrics_address(req.metrics_address());
  w.info.set_peak_flops_per_device(req.peak_flops_per_device());
  w.info.set_pool(req.pool().empty() ? "default" : req.pool());
  *w.info.mutable_labels() = req.labels();
  w.info.set_state(v1::Worker::STATE_ALIVE);
  IndexStoppingLocked(w, /*add=*/true);
  ReindexLocked(w);
  w.stop_grace = req.stop_grace_ms() > 0 ? absl::Milliseconds(req.stop_grace_ms()) : absl::Seconds(10);
  w.stop_delay = req.stop_delay_ms() > 0 ? absl::Milliseconds(req.stop_delay_ms()) : kDefaultStopDelay;
  w.port_min = req.store_port_min();
  w.port_max = req.store_port_max();
  w.orders.NewSession(absl::FailedPreconditionError(
      absl::StrCat("worker ", id, " registered again; this stream of session ", w.session, " is over")));
  w.session = ++last_session_;  // Streams of earlier registrations stop taking orders.
  RanksChangedLocked();  // Its ranks are adopted, stopped or gone next.
  // Its heartbeat counts from now; the fast path knows the new session (and nothing it saw yet).
  liveness_.Registered(id, w.live, w.session);
  return w;
}

void Coordinator::ApplyListedRanksLocked(WorkerEntry& w, const v1::RegisterWorkerRequest& req) {
  const std::string& id = req.name();
  // Exits the worker could not report while it was away come first.
  for (v1::ReportRankStatusRequest exit : req.exited()) {
    exit.set_worker_id(id);
    if (exit.event() == v1::ReportRankStatusRequest::EVENT_EXITED) ReportRankStatusLocked(exit).IgnoreError();
  }
  // Ranks the worker still runs that belong to no current attempt are stopped.
  for (const v1::RunningRank& r : req.running()) {
    JobEntry* e = nullptr;
    RankEntry* placed = PlacedHereLocked(id, r, &e);
    if (placed != nullptr &&
        (e->job.state() == v1::JOB_STATE_SCHEDULED || e->job.state() == v1::JOB_STATE_RUNNING)) {
      e->MarkStarted(r.rank());  // Adopted (or simply still running).
      placed->start_seq = 0;   // Known to the worker in this session from the start.
    } else {
      v1::Assignment a;
      a.set_action(v1::Assignment::ACTION_STOP);
      a.set_job_id(r.job_id());
      a.set_attempt(r.attempt());
      SendLocked(w, std::move(a));
    }
  }
}

void Coordinator::ReconcileRegistrationLocked(const std::string& id, const v1::RegisterWorkerRequest& req) {
  // A lost worker is back: its ranks are exactly those it lists (a listed rank of an earlier attempt
  // is stopped and holds its job back while the worker lists it: `stopping`), so its fences end.
  for (auto& [jid, e] : jobs_) e.fences.erase(id);
  // A worker that registers without a rank it was running for an attempt being adopted no longer has
  // it (its exit report, if any, follows).
  for (const std::string& jid : JobsOnLocked(id)) {
    JobEntry& e = jobs_.at(jid);
    if (!e.adopt_deadline) continue;
    for (int r : RanksOnLocked(id, jid)) {
      if (!e.ranks[r].started && !e.ranks[r].exited) RankGoneLocked(e, r);
    }
  }
  // Reconciliation: a rank of a live attempt placed on this worker that it does not report running is
  // gone — the worker restarted (faster than the heartbeat timeout: it never counted as lost) or lost
  // its queue of assignments in a reconnect. The attempt fails and restarts; its other ranks stop.
  std::set<std::tuple<std::string, int, int>> running;
  for (const v1::RunningRank& r : req.running()) running.insert({r.job_id(), r.attempt(), r.rank()});
  ReconcileLocked(id, running, std::numeric_limits<int64_t>::max(), "registered again without",
                  "(the worker restarted?)");
  NoteStoppingLocked(id, req.running());
}

bool Coordinator::ReconcileLocked(const std::string& id, const std::set<std::tuple<std::string, int, int>>& listed,
                                  int64_t up_to_seq, const std::string& seen, const std::string& hint) {
  const std::string& name = workers_[id].info.name();
  bool any = false;
  // A job's failure below may place another attempt (ranks_on_ changes): its jobs are taken first, its
  // ranks of each when that job's turn comes.
  for (const std::string& jid : JobsOnLocked(id)) {
    JobEntry& e = jobs_.at(jid);
    if (e.adopt_deadline) continue;  // Being adopted after a coordinator restart: the registration decides.
    const v1::JobState state = e.job.state();
    if (state == v1::JOB_STATE_PENDING) continue;  // No ranks.
    std::vector<int> missing;
    for (int r : RanksOnLocked(id, jid)) {
      if (!e.ranks[r].exited && e.ranks[r].start_seq <= up_to_seq && !listed.count({jid, e.job.attempt(), r})) {
        missing.push_back(r);
      }
    }
    if (missing.empty()) continue;
    any = true;
    for (int r : missing) RankGoneLocked(e, r);
    // A job that ended (failed, cancelled) while this rank was unaccounted for: the rank no longer
    // holds its device (before, it did until the coordinator restarted).
    if (IsTerminal(state)) continue;
    if (state == v1::JOB_STATE_RESTARTING) {
      // The attempt already failed — typically a peer's collective saw this worker's rank die, so
      // the peer's worker was blamed. The rank that vanished unreported is the cause: the history
      // names this worker. The job goes back to the queue once its last rank is gone.
      BlameWorkerLocked(e, id, absl::StrCat(seen, " rank ", missing.front(), " ", hint));
      AfterRankExitLocked(e);
      continue;
    }
    AttemptFailedLocked(e, absl::StrCat("worker ", name, " ", seen, " rank ", missing.front(),
                                        missing.size() > 1 ? absl::StrCat(" (and ", missing.size() - 1, " more)") : "",
                                        " of attempt ", e.job.attempt(), " ", hint),
                        /*counts=*/true, id);
  }
  return any;
}

int64_t Coordinator::SendLocked(WorkerEntry& w, v1::Assignment a, uint64_t after) {
  const uint64_t durable = writer_->durable();
  const int64_t seq = w.orders.Send(std::move(a), after, durable);
  if (w.orders.HeldBeyond(durable)) held_workers_.insert(w.info.id());  // OnStoreDurable flushes it.
  if (!w.orders.pushed()) changed_.SignalAll();  // A pulling stream (NextAssignment) waits for it.
  return seq;
}

RankEntry* Coordinator::PlacedHereLocked(const std::string& id, const v1::RunningRank& r,
                                                     JobEntry** job) {
  auto it = jobs_.find(r.job_id());
  if (it == jobs_.end() || IsTerminal(it->second.job.state()) || it->second.job.attempt() != r.attempt() ||
      r.rank() < 0 || r.rank() >= static_cast<int>(it->second.ranks.size()) ||
      it->second.ranks[r.rank()].worker_id != id) {
    return nullptr;
  }
  *job = &it->second;
  return &it->second.ranks[r.rank()];
}

bool Coordinator::NoteStoppingLocked(const std::string& id,
                                     const google::protobuf::RepeatedPtrField<v1::RunningRank>& listed) {
  WorkerEntry& w = workers_[id];
  std::map<std::tuple<std::string, int, int>, int> stopping;
  for (const v1::RunningRank& r : listed) {
    JobEntry* e = nullptr;
    RankEntry* placed = PlacedHereLocked(id, r, &e);
    if (placed == nullptr || placed->exited) stopping[{r.job_id(), r.attempt(), r.rank()}] = r.device();
  }
  IndexStoppingLocked(w, /*add=*/false);
  // A rank no longer listed is neither timed nor quarantined any more.
  bool changed = w.stopping.Set(std::move(stopping), Now());
  changed |= QuarantineOverdueLocked(w);
  if (w.info.state() == v1::Worker::STATE_ALIVE) IndexStoppingLocked(w, /*add=*/true);
  return changed;
}

bool Coordinator::QuarantineOverdueLocked(WorkerEntry& w) {
  if (options_.unkillable_rank_timeout <= absl::ZeroDuration()) return false;
  // Never before the worker could have stopped the rank: its stop grace (SIGTERM → SIGKILL) and delay.
  const absl::Duration deadline =
      std::max(options_.unkillable_rank_timeout, w.stop_grace + w.stop_delay + WorkerLiveness::kFenceSlack);
  const std::vector<std::string> reasons = w.stopping.QuarantineOverdue(Now(), deadline);
  if (options_.on_transition) {
    for (const std::string& reason : reasons) options_.on_transition(absl::StrCat("worker ", w.info.name(), ": ", reason));
  }
  return !reasons.empty();
}

void Coordinator::UnindexRanksLocked(const JobEntry& e) {
  const std::string* last = nullptr;  // A worker's ranks mostly come together.
  for (const RankEntry& r : e.ranks) {
    if (last != nullptr && *last == r.worker_id) continue;
    last = &r.worker_id;
    auto on = ranks_on_.find(r.worker_id);
    if (on == ranks_on_.end()) continue;
    on->second.erase(e.job.id());
    if (on->second.empty()) ranks_on_.erase(on);
  }
}

void Coordinator::IndexRanksLocked(const JobEntry& e) {
  std::vector<int>* here = nullptr;
  const std::string* last = nullptr;
  for (size_t r = 0; r < e.ranks.size(); ++r) {
    const std::string& wid = e.ranks[r].worker_id;
    if (wid.empty()) continue;  // A stored placement without this rank.
    if (last == nullptr || *last != wid) here = &ranks_on_[wid][e.job.id()], last = &wid;
    here->push_back(static_cast<int>(r));
  }
}

std::vector<std::string> Coordinator::JobsOnLocked(const std::string& worker_id) const {
  std::vector<std::string> jobs;
  auto on = ranks_on_.find(worker_id);
  if (on == ranks_on_.end()) return jobs;
  for (const auto& [jid, ranks] : on->second) jobs.push_back(jid);
  return jobs;
}

std::vector<int> Coordinator::RanksOnLocked(const std::string& worker_id, const std::string& job_id) const {
  auto on = ranks_on_.find(worker_id);
  if (on == ranks_on_.end()) return {};
  auto ranks = on->second.find(job_id);
  return ranks == on->second.end() ? std::vector<int>() : ranks->second;
}

void Coordinator::RefreshWorkerUsageLocked(const std::string* only) {
  auto recount = [&](const std::string& id, WorkerEntry& w) {
    w.used_devices.clear(), w.used_ports.clear();
    for (const auto& [key, device] : w.stopping.ranks()) w.used_devices.insert(device);
    auto on = ranks_on_.find(id);
    if (on == ranks_on_.end()) return;
    for (const auto& [jid, ranks] : on->second) {
      const JobEntry& e = jobs_.at(jid);
      for (int r : ranks) {
        if (e.ranks[r].exited) continue;
        w.used_devices.insert(e.ranks[r].local_rank);
        if (r == 0) w.used_ports.insert(e.job.store_port());
      }
    }
  };
  if (only != nullptr) {
    auto it = workers_.find(*only);
    if (it == workers_.end()) return;
    recount(it->first, it->second);
    ReindexLocked(it->second);
  } else {
    for (auto& [id, w] : workers_) recount(id, w), ReindexLocked(w);
  }
}

absl::StatusOr<std::optional<v1::Assignment>> Coordinator::NextAssignment(const std::string& worker_id,
                                                                         absl::Duration timeout, int64_t session,
                                                                         int64_t stream) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;  // A blocking wait: real time.
  while (true) {
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || it->second.info.state() == v1::Worker::STATE_LOST) {
      return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered; register again"));
    }
    WorkerEntry& w = it->second;
    if (session != 0 && session != w.session) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " registered again (session ",
                                                        w.session, "); this stream of session ", session,
                                                        " is over"));
    }
    if (stream != 0 && stream != w.orders.stream()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", worker_id, " opened a newer assignment stream; this one is over"));
    }
    if (std::shared_ptr<const v1::Assignment> a = w.orders.Take(writer_->durable())) {
      return std::optional<v1::Assignment>(*a);  // Kept until acknowledged.
    }
    if (absl::Now() >= deadline) return std::optional<v1::Assignment>();
    changed_.WaitWithDeadline(&mu_, deadline);
  }
}

int64_t Coordinator::StreamOpened(const std::string& worker_id, int64_t session) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.session != session) return 0;
  WorkerEntry& w = it->second;
  return OpenStreamLocked(w);
}

int64_t Coordinator::OpenStreamLocked(WorkerEntry& w) {
  // Orders given to an earlier stream of the session and not acknowledged go first again.
  w.orders.Open(++last_stream_, absl::FailedPreconditionError(absl::StrCat(
                                    "worker ", w.info.id(), " opened a newer assignment stream; this one is over")));
  changed_.SignalAll();  // A pulling stream it replaces ends.
  return w.orders.stream();
}

absl::StatusOr<int64_t> Coordinator::AttachAssignmentSink(const std::string& worker_id, int64_t session,
                                                          AssignmentSink* sink) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.info.state() == v1::Worker::STATE_LOST) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered; register again"));
  }
  WorkerEntry& w = it->second;
  if (session != 0 && session != w.session) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " registered again (session ", w.session,
                                                      "); this stream of session ", session, " is over"));
  }
  const int64_t stream = OpenStreamLocked(w);
  w.orders.Attach(sink, writer_->durable());
  return stream;
}

void Coordinator::DetachAssignmentSink(const std::string& worker_id, int64_t stream) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) it->second.orders.Detach(stream);
}

absl::Status Coordinator::ReportRankStatus(const v1::ReportRankStatusRequest& req) {
  absl::MutexLock lock(&mu_);
  return ReportRankStatusLocked(req);
}

absl::Status Coordinator::ReportRankStatusLocked(const v1::ReportRankStatusRequest& req) {
  auto it = jobs_.find(req.job_id());
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", req.job_id(), " does not exist"));
  JobEntry& e = it->second;
  if (req.attempt() != e.job.attempt() || req.rank() < 0 || req.rank() >= static_cast<int>(e.ranks.size()) ||
      e.ranks[req.rank()].worker_id != req.worker_id()) {
    return absl::OkStatus();  // A report about an earlier attempt (or a rank it no longer owns).
  }
  switch (req.event()) {
    case v1::ReportRankStatusRequest::EVENT_STARTED: {
      e.MarkStarted(req.rank());
      const bool all = e.AllStarted();
      if (all && e.job.state() == v1::JOB_STATE_SCHEDULED) {
        e.progressed_at = Now();
        SetStateLocked(e, v1::JOB_STATE_RUNNING, absl::StrCat("attempt ", e.job.attempt(), " running"));
      }
      return absl::OkStatus();
    }
    case v1::ReportRankStatusRequest::EVENT_PROGRESS: {
      v1::JobProgress p = req.progress();
      // The job's warnings: the ones it had, then the new ones (each once, the newest kMaxJobWarnings).
      const bool warned = MergeWarnings(e.job.progress(), &p);
      if (p.step() == 0) {  // Warnings alone (before the attempt's first step).
        *e.job.mutable_progress()->mutable_warnings() = p.warnings();
        if (warned) ChangedLocked(e, /*persist=*/true);
        return absl::OkStatus();
      }
      p.set_total_steps(e.job.spec().train().steps());
      if (p.step() != e.job.progress().step()) e.progressed_at = Now();  // The watchdog's (CheckProgressLocked).
      // The loss of the job's first reported step stays, so that "did it learn" reads off one message.
      const bool first = p.step() <= 1 || e.job.progress().step() == 0;
      // A new checkpoint is persisted at once: after a coordinator crash the next attempt's history
      // says where it resumes from.
      bool persist = p.last_checkpoint_step() != e.job.progress().last_checkpoint_step();
      p.set_first_loss(first ? p.loss() : e.job.progress().first_loss());
      // The newest evaluation stays until a newer one comes (a new attempt reports none at first),
      // unless the job went back to before it.
      const v1::JobProgress& old = e.job.progress();
      if (p.val_step() == 0 && old.val_step() > 0 && old.val_step() <= p.step()) {
        p.set_val_step(old.val_step());
        p.set_val_loss(old.val_loss());
      }
      *e.job.mutable_progress() = p;
      if (e.job.history_size() > 0 && e.job.history(e.job.history_size() - 1).attempt() == e.job.attempt()) {
        v1::Attempt* h = e.job.mutable_history(e.job.history_size() - 1);
        // Where its ranks really resumed (an older checkpoint when the newest was damaged) and what
        // they recomputed; persisted at once the first time (a coordinator crash must not lose it).
        const bool first_report = h->last_step() == 0;
        h->set_resumed_from_step(p.resumed_from_step());
        h->set_recomputed_steps(p.discarded_steps());
        h->set_last_step(p.step());
        if (first_report) persist = true;
      }
      ChangedLocked(e, persist || warned);
      return absl::OkStatus();
    }
    case v1::ReportRankStatusRequest::EVENT_EXITED: {
      RankGoneLocked(e, req.rank());
      if (req.exit_code() == 0) {
        e.MarkFinished(req.rank());
        const bool all = e.AllExited();
        if (all && (e.job.state() == v1::JOB_STATE_RUNNING || e.job.state() == v1::JOB_STATE_SCHEDULED)) {
          EndAttemptLocked(e, v1::JOB_STATE_SUCCEEDED, "all ranks finished", "");
          SetStateLocked(e, v1::JOB_STATE_SUCCEEDED, absl::StrCat("all ranks finished (attempt ", e.job.attempt(), ")"));
        }
        AfterRankExitLocked(e);
      } else if (e.job.state() == v1::JOB_STATE_RUNNING || e.job.state() == v1::JOB_STATE_SCHEDULED) {
        const std::string& name = workers_.count(req.worker_id()) ? workers_[req.worker_id()].info.name() : req.worker_id();
        AttemptFailedLocked(e, absl::StrCat("rank ", req.rank(), " on worker ", name, " exited with code ",
                                            req.exit_code(), req.error().empty() ? "" : ": ", req.error()),
                            /*counts=*/true, req.worker_id());
      } else {
        AfterRankExitLocked(e);
      }
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError("event: must be started, progress or exited");
  }
}

std::map<v1::Worker::State, int> Coordinator::WorkersByState() {
  absl::MutexLock lock(&mu_);
  std::map<v1::Worker::State, int> out;
  for (auto& [id, w] : workers_) ++out[w.info.state()];
  return out;
}

}  // namespace tessera::coordinator
