// Coordinator's heartbeats and liveness: a worker's heartbeat (acknowledgement, reconciliation of the
// ranks it lists; a repeated one takes WorkerLiveness's path without the coordinator's lock), and the
// check that declares silent workers lost and fences their jobs.
#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"

namespace tessera::coordinator {

absl::Status Coordinator::Heartbeat(const std::string& worker_id, int64_t session) {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker_id);
  req.set_session(session);
  return Heartbeat(req);
}

absl::Status Coordinator::Heartbeat(const v1::HeartbeatRequest& req) {
  const uint64_t digest = WorkerLiveness::RanksDigest(req);
  if (liveness_.TryFastBeat(req, digest)) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  liveness_.CountLockedBeat();
  auto it = workers_.find(req.worker_id());
  if (it == workers_.end() || it->second.info.state() == v1::Worker::STATE_LOST) {
    return absl::NotFoundError(absl::StrCat("worker ", req.worker_id(), " is not registered; register again"));
  }
  WorkerEntry& w = it->second;
  if (req.session() != 0 && req.session() != w.session) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", req.worker_id(), " registered again (session ",
                                                      w.session, "); session ", req.session(), " is over"));
  }
  liveness_.Beat(*w.live);
  if (req.session() == 0) return absl::OkStatus();  // Unfenced: nothing to acknowledge or reconcile.
  if (absl::Status s = w.orders.Acknowledge(req.applied_seq()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(s.message(), " (session ", w.session, ")"));
  }
  if (req.reports_ranks()) {
    std::set<std::tuple<std::string, int, int>> listed;
    for (const v1::RunningRank& r : req.ranks()) listed.insert({r.job_id(), r.attempt(), r.rank()});
    // The usage and the queue are revisited only when a rank was gone.
    const bool stopping_changed = NoteStoppingLocked(req.worker_id(), req.ranks());
    if (ReconcileLocked(req.worker_id(), listed, w.orders.applied_seq(), "no longer has", "(its exit was not reported)") ||
        stopping_changed) {
      RefreshWorkerUsageLocked(&req.worker_id());
      TryScheduleLocked();
      changed_.SignalAll();
    }
  }
  // What the next heartbeat may repeat without mu_ (after the changes this one made).
  liveness_.Applied(*w.live, req, digest);
  return absl::OkStatus();
}

void Coordinator::CheckLiveness() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = Now();
  for (auto& [jid, e] : jobs_) CheckAdoptionLocked(e);
  for (auto& [jid, e] : jobs_) CheckStartLocked(e);
  for (auto& [jid, e] : jobs_) CheckProgressLocked(e);
  bool reschedule = false;
  for (auto& [wid, w] : workers_) {
    // A live worker that keeps listing (unchanged heartbeats take the fast path) a superseded rank it
    // cannot stop: past the deadline its job goes on without it.
    if (w.info.state() == v1::Worker::STATE_ALIVE && !w.stopping.empty()) {
      IndexStoppingLocked(w, /*add=*/false);
      reschedule |= QuarantineOverdueLocked(w);
      IndexStoppingLocked(w, /*add=*/true);
    }
    if (w.info.state() != v1::Worker::STATE_ALIVE || !liveness_.Silent(*w.live)) continue;
    IndexStoppingLocked(w, /*add=*/false);  // A lost worker's superseded ranks: fences (below).
    w.info.set_state(v1::Worker::STATE_LOST);
    ReindexLocked(w);
    liveness_.Lost(*w.live);  // Its heartbeats go to the slow path, which refuses them.
    w.orders.Drop(absl::NotFoundError(absl::StrCat("worker ", wid, " is not registered; register again")));
    reschedule = true;  // Jobs waiting for devices now wait for more (their reasons say so).
    // Lost is not dead: cut off from the coordinator only, the worker runs its ranks until its lease
    // runs out, and they are gone after its stop grace. Until then no new attempt of their jobs.
    const absl::Time surely_stopped = liveness_.SurelyStopped(*w.live, w.stop_grace, w.stop_delay);
    // So are the superseded ranks it was still stopping (they held their jobs back while it was alive).
    if (surely_stopped > now) {
      for (const auto& [key, device] : w.stopping.ranks()) {
        auto j = jobs_.find(std::get<0>(key));
        if (j != jobs_.end()) j->second.fences[wid] = surely_stopped;
      }
    }
    for (auto& [jid, e] : jobs_) {
      BlameWorkerLocked(e, wid, absl::StrCat("was lost (no heartbeat for ", absl::FormatDuration(options_.heartbeat_timeout), ")"));
      bool hit = false;
      for (int r : RanksOnLocked(wid, jid)) {
        if (!e.ranks[r].exited) RankGoneLocked(e, r), hit = true;
      }
      if (hit && surely_stopped > now) e.fences[wid] = surely_stopped;
      if (!hit) continue;
      if (e.job.state() == v1::JOB_STATE_RUNNING || e.job.state() == v1::JOB_STATE_SCHEDULED) {
        AttemptFailedLocked(e, absl::StrCat("worker ", w.info.name(), " lost (no heartbeat for ",
                                            absl::FormatDuration(options_.heartbeat_timeout), ")"),
                            /*counts=*/true, wid);
      } else {
        AfterRankExitLocked(e);
      }
    }
    changed_.SignalAll();
  }
  // A fence that ended lets its job be placed.
  for (const std::string& jid : queue_.ids()) {
    for (const auto& [worker, until] : jobs_[jid].fences) reschedule |= until <= now;
  }
  if (reschedule) {
    TryScheduleLocked();
    changed_.SignalAll();
  }
}

}  // namespace tessera::coordinator
