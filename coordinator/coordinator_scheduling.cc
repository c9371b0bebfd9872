// The coordinator's scheduling: a pass over the queue (its order and backfill: job_queue.h), what
// holds a job back (a lost worker's fence, a superseded rank still stopping), placement over the free
// devices, the start of an attempt, and Plan (the same placement, without starting anything).
#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spec/job_spec.h"
#include "spec/layout_of.h"
#include "spec/priority.h"
#include "coordinator/coordinator.h"
#include "coordinator/placement.h"
#include "layout/rank_generator.h"

namespace tessera::coordinator {

namespace {

v1::DeviceKind KindOf(const v1::JobSpec& spec) {
  return spec.device() == v1::DEVICE_CUDA ? v1::DEVICE_KIND_CUDA : v1::DEVICE_KIND_CPU;
}

// "cpu devices" / "cpu devices of pool 'a'" (the default pool is the whole cluster of most installations).
std::string DevicesOf(const std::pair<v1::DeviceKind, std::string>& key) {
  return absl::StrCat(key.first == v1::DEVICE_KIND_CUDA ? "cuda" : "cpu", " devices",
                      key.second == "default" ? "" : absl::StrCat(" of pool ", spec::Quote(key.second)));
}

}  // namespace

PoolKey Coordinator::PoolOf(const v1::JobSpec& spec) {
  return {KindOf(spec), spec.placement().pool().empty() ? "default" : spec.placement().pool()};
}

int Coordinator::PriorityOf(const v1::JobSpec& spec) {
  return spec::ParsePriority(spec.scheduling().priority()).value_or(spec::kPriorityNormal);
}

// The job's placement from its layout's rank generator. Queued specs are valid, so the generator
// exists; anything else is a reason to wait, never a crash.
absl::StatusOr<Placement> Coordinator::PlaceLocked(const v1::JobSpec& spec) {
  auto ranks = layout::RankGenerator::Create(spec::LayoutOf(spec));
  if (!ranks.ok()) return absl::FailedPreconditionError(ranks.status().message());
  const PoolKey key = PoolOf(spec);
  const int64_t free = free_index_.Free(key);
  if (free < ranks->world_size()) {  // PlaceRanks' own reason, from the totals.
    return absl::ResourceExhaustedError(NotEnoughDevices(ranks->world_size(), free, free_index_.ByFree(key).size()));
  }
  return PlaceRanks(*ranks, FreeDevicesLocked(key, ranks->world_size(), ranks->size(layout::Axis::kTp)));
}

void Coordinator::TryScheduleLocked() {
  if (defer_scheduling_) return;  // The registration in progress schedules when it is done.
  if (queue_.empty()) return;  // Nothing to place (and no scan of every worker for it).
  // The order and backfill are the queue's (job_queue.h); here: what holds a job back, whether its
  // pool can ever hold it, and where its ranks go.
  const std::map<std::string, std::string> stopping_jobs = StoppingJobsLocked();
  queue_.Pass(Now(), [&](const std::string& id, bool behind_reservation) {
    JobEntry& e = jobs_[id];
    const v1::JobSpec& spec = e.job.spec();
    const int world = static_cast<int>(spec::WorldSize(spec));  // Queued specs are valid: ≤ 4096.
    const PoolKey key = PoolOf(spec);
    const std::string prefix = e.requeue_cause.empty() ? "" : e.requeue_cause + "; ";
    const int64_t cluster = free_index_.Devices(key);
    // Never two attempts of one job at once: not while an earlier attempt's ranks may be alive.
    if (std::string held = FencedLocked(e, stopping_jobs); !held.empty()) {
      WaitingLocked(e, prefix + held);
      return JobQueue::Outcome::kHeld;
    }
    if (world > cluster && cluster == 0 && key.second != "default") {
      WaitingLocked(e, absl::StrCat(prefix, "needs ", world, " ", DevicesOf(key), ": no live worker is in pool ",
                                    spec::Quote(key.second), " (tessera-worker --pool); waiting for its workers"));
      return JobQueue::Outcome::kNeverFits;
    }
    if (world > cluster) {
      WaitingLocked(e, absl::StrCat(prefix, "needs ", world, " ", DevicesOf(key), ", more than the whole ",
                                    key.second == "default" ? "cluster" : "pool", "'s ", cluster,
                                    " (live workers); waiting for more workers"));
      return JobQueue::Outcome::kNeverFits;
    }
    if (behind_reservation) {
      WaitingLocked(e, absl::StrCat(prefix, "waiting behind an earlier job that has waited longer than ",
                                    absl::FormatDuration(options_.backfill_limit)));
      return JobQueue::Outcome::kWaits;
    }
    absl::StatusOr<Placement> slots = PlaceLocked(spec);
    if (!slots.ok()) {
      WaitingLocked(e, absl::StrCat(prefix, "waiting for devices: ", slots.status().message()));
      return JobQueue::Outcome::kWaits;
    }
    WorkerEntry& w0 = workers_[slots->slots[0].worker_id];
    const int port = NextStorePortLocked(w0);
    if (port < 0) {
      WaitingLocked(e, absl::StrCat(prefix, "waiting for a free store port on worker ", w0.info.name()));
      return JobQueue::Outcome::kWaits;
    }
    StartAttemptLocked(e, *slots, port);
    return JobQueue::Outcome::kPlaced;
  });
}

std::map<std::string, std::string> Coordinator::StoppingJobsLocked() {
  std::map<std::string, std::string> out;
  for (const auto& [job, workers] : stopping_index_) out.emplace(job, workers_[*workers.begin()].info.name());
  return out;
}

void Coordinator::IndexStoppingLocked(const WorkerEntry& w, bool add) {
  for (const auto& [key, device] : w.stopping.ranks()) {
    if (add && !w.stopping.HoldsJob(key)) continue;  // Quarantined: holds its job back no more.
    const std::string& job = std::get<0>(key);
    if (add) {
      stopping_index_[job].insert(w.info.id());
    } else if (auto it = stopping_index_.find(job); it != stopping_index_.end()) {
      it->second.erase(w.info.id());
      if (it->second.empty()) stopping_index_.erase(it);
    }
  }
}

void Coordinator::ReindexLocked(WorkerEntry& w) {
  FreeDeviceIndex::Worker x;
  x.alive = w.info.state() == v1::Worker::STATE_ALIVE;
  x.key = {w.info.device_kind(), w.info.pool()};
  x.devices = w.info.device_count();
  x.free = x.devices;
  for (int d : w.used_devices) x.free -= d >= 0 && d < x.devices;
  free_index_.Set(w.info.id(), x);
}

std::string Coordinator::FencedLocked(JobEntry& e, const std::map<std::string, std::string>& stopping_jobs) {
  const absl::Time now = Now();
  for (auto it = e.fences.begin(); it != e.fences.end();) {
    if (it->second <= now) {
      it = e.fences.erase(it);
      continue;
    }
    auto w = workers_.find(it->first);
    const absl::Duration grace = w == workers_.end() ? absl::Seconds(10) : w->second.stop_grace;
    const absl::Duration delay = w == workers_.end() ? kDefaultStopDelay : w->second.stop_delay;
    return absl::StrCat("waiting until lost worker ", it->first, " has surely stopped the ranks of attempt ",
                        e.job.attempt(), " (its lease of ", absl::FormatDuration(options_.worker_lease),
                        ", stop grace of ", absl::FormatDuration(grace), " and stop delay of ",
                        absl::FormatDuration(delay), " after its last heartbeat)");
  }
  if (auto w = stopping_jobs.find(e.job.id()); w != stopping_jobs.end()) {
    return absl::StrCat("waiting for worker ", w->second, " to stop its rank(s) of an earlier attempt");
  }
  return "";
}

bool Coordinator::RanksMayLiveLocked(const JobEntry& e, const std::map<std::string, std::string>& stopping_jobs) {
  if (!e.AllExited()) return true;
  for (const auto& [worker, until] : e.fences) {
    if (until > Now()) return true;
  }
  return stopping_jobs.count(e.job.id()) > 0;
}

int Coordinator::NextStorePortLocked(WorkerEntry& w0) {
  // Round robin over the worker's range: the next attempt does not take the port its predecessor's
  // store just closed (its connections linger in TIME_WAIT; another process may have taken it).
  const int range = w0.port_max - w0.port_min + 1;
  for (int k = 0; k < range; ++k) {
    const int p = w0.port_min + (std::max(0, w0.next_port - w0.port_min) + k) % range;
    if (!w0.used_ports.count(p)) {
      w0.next_port = p + 1;
      return p;
    }
  }
  return -1;
}

void Coordinator::StartAttemptLocked(JobEntry& e, const Placement& placement, int port) {
  const v1::JobSpec& spec = e.job.spec();
  const int world = static_cast<int>(placement.slots.size());
  WorkerEntry& w0 = workers_[placement.slots[0].worker_id];
  e.job.set_attempt(e.job.attempt() + 1);
  e.job.clear_placement();
  e.job.set_placement_explanation(placement.explanation);
  UnindexRanksLocked(e);
  e.ResetRanks(world);
  e.job.set_store_host(w0.info.host());
  e.job.set_store_port(port);
  w0.used_ports.insert(port);
  const std::string job_uid = absl::StrCat(e.job.id(), "@", e.job.created_unix_ms());  // With the attempt: the fencing token.
  e.job.mutable_placement()->Reserve(world);
  std::vector<WorkerEntry*> on(world);  // Slot r's worker: the slots of one worker come together (tp inside a node).
  for (int r = 0; r < world; ++r) {
    const Slot& s = placement.slots[r];
    on[r] = r > 0 && s.worker_id == placement.slots[r - 1].worker_id ? on[r - 1] : &workers_[s.worker_id];
    e.ranks[r].worker_id = s.worker_id;
    e.ranks[r].local_rank = s.local_rank;
    auto* p = e.job.add_placement();
    p->set_rank(r);
    p->set_worker_id(s.worker_id);
    p->set_local_rank(s.local_rank);
    on[r]->used_devices.insert(s.local_rank);
  }
  IndexRanksLocked(e);
  for (int r = 0; r < world; ++r) {
    if (r + 1 == world || on[r + 1] != on[r]) ReindexLocked(*on[r]);  // At the end of each run of its slots.
  }
  v1::Attempt* h = e.job.add_history();
  h->set_attempt(e.job.attempt());
  h->set_started_unix_ms(absl::ToUnixMillis(WallNow()));
  h->set_resumed_from_step(e.job.progress().last_checkpoint_step());
  // Each worker once, in rank order (a search of the list was O(ranks·workers)).
  std::set<absl::string_view> listed;
  for (size_t r = 0; r < placement.slots.size(); ++r) {
    const Slot& s = placement.slots[r];
    if (r > 0 && s.worker_id == placement.slots[r - 1].worker_id) continue;
    if (listed.insert(s.worker_id).second) {
      h->add_workers(s.worker_id);
      h->add_worker_hosts(workers_[s.worker_id].info.host());
    }
  }
  if (e.job.history_size() > kMaxHistory) e.job.mutable_history()->DeleteSubrange(0, e.job.history_size() - kMaxHistory);
  e.scheduled_at = Now();
  e.progressed_at = absl::InfinitePast();
  if (options_.on_scheduled) options_.on_scheduled(Now() - queue_.QueuedAt(e.job.id()));
  // The first workers by name in the reason (the history lists them all).
  std::string names;
  for (int i = 0; i < h->workers_size() && i < 4; ++i) absl::StrAppend(&names, i ? ", " : "", h->workers(i));
  if (h->workers_size() > 4) absl::StrAppend(&names, ", … ", h->workers_size() - 4, " more");
  SetStateLocked(e, v1::JOB_STATE_SCHEDULED,
                 absl::StrCat("attempt ", e.job.attempt(), " placed: ", world, " rank", world == 1 ? "" : "s", " on ",
                              h->workers_size(), " worker", h->workers_size() == 1 ? "" : "s", " (", names, ")",
                              e.requeue_cause.empty() ? "" : absl::StrCat(" (after: ", e.requeue_cause, ")")));
  e.requeue_cause.clear();
  // Write-ahead: the START orders leave once the SCHEDULED row — the attempt number, half of the
  // fencing token — is durable (e.ticket), so that a restarted coordinator never numbers another
  // attempt the same.
  std::set<const WorkerEntry*> given;  // Workers sent the spec: with their first order only (worker/start_specs.h).
  for (int r = 0; r < world; ++r) {
    v1::Assignment a;
    a.set_action(v1::Assignment::ACTION_START);
    a.set_job_id(e.job.id());
    a.set_attempt(e.job.attempt());
    a.set_rank(r);
    a.set_local_rank(placement.slots[r].local_rank);
    a.set_world_size(world);
    a.set_store_host(w0.info.host());
    a.set_store_port(port);
    if (given.insert(on[r]).second) *a.mutable_spec() = spec;
    a.set_owner(e.job.owner());
    a.set_job_uid(job_uid);
    e.ranks[r].start_seq = SendLocked(*on[r], std::move(a), e.ticket);
  }
}

absl::Status Coordinator::VerifyIndexes() {
  absl::MutexLock lock(&mu_);
  FreeDeviceIndex free;
  std::map<std::string, std::set<std::string>> stopping;
  for (const auto& [id, w] : workers_) {
    if (w.info.state() != v1::Worker::STATE_ALIVE) continue;
    int n = 0;
    for (int d = 0; d < w.info.device_count(); ++d) n += !w.used_devices.count(d);
    free.Set(id, {true, {w.info.device_kind(), w.info.pool()}, w.info.device_count(), n});
    for (const auto& [key, device] : w.stopping.ranks()) {
      if (w.stopping.HoldsJob(key)) stopping[std::get<0>(key)].insert(id);
    }
  }
  if (std::string d = free_index_.Difference(free); !d.empty()) {  // "The other" is what the workers say.
    return absl::InternalError(absl::StrCat("the free-device index is stale: ", d));
  }
  std::map<std::string, std::map<std::string, std::vector<int>, JobIdLess>> on;
  for (const auto& [jid, e] : jobs_) {
    JobEntry::RankCounts counts;
    for (size_t r = 0; r < e.ranks.size(); ++r) {
      if (!e.ranks[r].worker_id.empty()) on[e.ranks[r].worker_id][jid].push_back(static_cast<int>(r));
      const JobEntry::RankCounts x = JobEntry::CountOf(e.ranks[r]);
      counts.started += x.started, counts.exited += x.exited, counts.settled += x.settled, counts.lost += x.lost;
    }
    if (e.bad_transitions > 0) {
      return absl::InternalError(absl::StrCat("job ", jid, " made ", e.bad_transitions,
                                              " state change(s) the job state machine does not allow (job_entry.h), "
                                              "the newest ", e.last_bad_transition));
    }
    if (!(counts == e.counts)) {
      return absl::InternalError(absl::StrCat("the rank counts of job ", jid, " are stale: ", e.counts.started,
                                              " started, ", e.counts.exited, " exited; really ", counts.started,
                                              ", ", counts.exited));
    }
  }
  if (on != ranks_on_) {
    return absl::InternalError(absl::StrCat("the ranks-by-worker index is stale: ", ranks_on_.size(),
                                            " workers; really ", on.size()));
  }
  if (stopping != stopping_index_) {
    return absl::InternalError(absl::StrCat("the stopping index is stale: ", stopping_index_.size(), " jobs; really ",
                                            stopping.size()));
  }
  return absl::OkStatus();
}

std::vector<FreeDevices> Coordinator::FreeDevicesLocked(const PoolKey& key, int64_t world, int group) {
  std::vector<FreeDevices> free;
  PlacementPrefix prefix(world, group);
  for (const auto& [minus_free, id] : free_index_.ByFree(key)) {
    if (prefix.Enough(-minus_free)) break;
    prefix.Add(-minus_free);
    const WorkerEntry& w = workers_[id];
    FreeDevices f{id, {}};
    for (int d = 0; d < w.info.device_count(); ++d) {
      if (!w.used_devices.count(d)) f.free_local_ranks.push_back(d);
    }
    free.push_back(std::move(f));
  }
  return free;
}

absl::StatusOr<v1::PlanJobResponse> Coordinator::Plan(const v1::JobSpec& spec) {
  if (absl::Status s = spec::ToStatus(spec::ValidateJobSpec(spec)); !s.ok()) return s;
  v1::PlanJobResponse plan;
  const auto& p = spec.parallel();
  plan.set_world_size(spec::WorldSize(spec));
  plan.set_dp(p.dp());
  plan.set_tp(p.tp());
  plan.set_pp(p.pp());
  plan.set_sp(p.sp());
  plan.set_order(p.order());
  absl::MutexLock lock(&mu_);
  auto slots = PlaceLocked(spec);
  if (!slots.ok()) {
    plan.set_reason(std::string(slots.status().message()));
    return plan;
  }
  plan.set_placeable_now(true);
  for (int r = 0; r < plan.world_size(); ++r) {
    auto* x = plan.add_placement();
    x->set_rank(r);
    x->set_worker_id(slots->slots[r].worker_id);
    x->set_local_rank(slots->slots[r].local_rank);
  }
  plan.set_reason(slots->explanation);
  return plan;
}

}  // namespace tessera::coordinator
