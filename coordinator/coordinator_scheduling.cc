// The coordinator's scheduling: the queue in order with backfill, what holds a job back (a lost
// worker's fence, a superseded rank still stopping), placement over the free devices, the start of an
// attempt, and Plan (the same placement, without starting anything).
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/spec/job_spec.h"
#include "common/spec/layout_of.h"
#include "coordinator/coordinator.h"
#include "coordinator/placement.h"
#include "layout/rank_generator.h"

namespace tessera::coordinator {

namespace {

v1::DeviceKind KindOf(const v1::JobSpec& spec) {
  return spec.device() == v1::DEVICE_CUDA ? v1::DEVICE_KIND_CUDA : v1::DEVICE_KIND_CPU;
}

// The job's placement over `free`, from its layout's rank generator. Queued specs are valid, so the
// generator exists; anything else is a reason to wait, never a crash.
absl::StatusOr<Placement> PlaceJob(const v1::JobSpec& spec, const std::vector<FreeDevices>& free) {
  auto ranks = layout::RankGenerator::Create(spec::LayoutOf(spec));
  if (!ranks.ok()) return absl::FailedPreconditionError(ranks.status().message());
  return PlaceRanks(*ranks, free);
}

}  // namespace

void Coordinator::TryScheduleLocked() {
  if (defer_scheduling_) return;  // The registration in progress schedules when it is done.
  if (queue_.empty()) return;  // Nothing to place (and no scan of every worker for it).
  // In queue order (first come, first served); a job that does not fit lets later ones that do fit
  // go first (backfill), unless it has waited longer than backfill_limit: then nothing behind it of
  // its device kind is placed until it is, so that a large job is not starved by a stream of small
  // ones. A job larger than every live device of its kind together never blocks the others.
  std::set<v1::DeviceKind> reserved;  // Kinds whose devices a long-waiting job holds back.
  const std::map<std::string, std::string> stopping_jobs = StoppingJobsLocked();
  for (auto it = queue_.begin(); it != queue_.end();) {
    JobEntry& e = jobs_[*it];
    const v1::JobSpec& spec = e.job.spec();
    const int world = static_cast<int>(spec::WorldSize(spec));  // Queued specs are valid: ≤ 4096.
    const v1::DeviceKind kind = KindOf(spec);
    std::string reason;
    const std::string prefix = e.requeue_cause.empty() ? "" : e.requeue_cause + "; ";
    const int64_t cluster = ClusterDevicesLocked(kind);
    absl::StatusOr<Placement> slots = absl::ResourceExhaustedError("");
    // Never two attempts of one job at once: not while an earlier attempt's ranks may be alive.
    if (std::string held = FencedLocked(e, stopping_jobs); !held.empty()) {
      WaitingLocked(e, prefix + held);
      ++it;
      continue;
    }
    if (world > cluster) {
      reason = absl::StrCat(prefix, "needs ", world, " ", kind == v1::DEVICE_KIND_CUDA ? "cuda" : "cpu",
                            " devices, more than the whole cluster's ", cluster,
                            " (live workers); waiting for more workers");
    } else if (reserved.count(kind)) {
      reason = absl::StrCat(prefix, "waiting behind an earlier job that has waited longer than ",
                            absl::FormatDuration(options_.backfill_limit));
    } else {
      slots = PlaceJob(spec, FreeDevicesLocked(kind));
      if (!slots.ok()) reason = absl::StrCat(prefix, "waiting for devices: ", slots.status().message());
    }
    if (slots.ok()) {
      WorkerEntry& w0 = workers_[slots->slots[0].worker_id];
      const int port = NextStorePortLocked(w0);
      if (port < 0) {
        reason = absl::StrCat(prefix, "waiting for a free store port on worker ", w0.info.name());
      } else {
        StartAttemptLocked(e, *slots, port);
        it = queue_.erase(it);
        continue;
      }
    }
    WaitingLocked(e, reason);
    if (world <= cluster && Now() - e.queued_at > options_.backfill_limit) reserved.insert(kind);
    ++it;
  }
}

std::map<std::string, std::string> Coordinator::StoppingJobsLocked() {
  std::map<std::string, std::string> out;
  for (const auto& [id, w] : workers_) {
    if (w.info.state() != v1::Worker::STATE_ALIVE) continue;  // A lost worker's ranks: its fence.
    for (const auto& [key, device] : w.stopping) out.emplace(std::get<0>(key), w.info.name());
  }
  return out;
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
    return absl::StrCat("waiting until lost worker ", it->first, " has surely stopped the ranks of attempt ",
                        e.job.attempt(), " (its lease of ", absl::FormatDuration(options_.worker_lease),
                        " and stop grace of ", absl::FormatDuration(grace), " after its last heartbeat)");
  }
  if (auto w = stopping_jobs.find(e.job.id()); w != stopping_jobs.end()) {
    return absl::StrCat("waiting for worker ", w->second, " to stop its rank(s) of an earlier attempt");
  }
  return "";
}

bool Coordinator::RanksMayLiveLocked(const JobEntry& e, const std::map<std::string, std::string>& stopping_jobs) {
  if (std::any_of(e.ranks.begin(), e.ranks.end(), [](const RankEntry& r) { return !r.exited; })) return true;
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
  e.ranks.assign(world, RankEntry{});
  e.job.set_store_host(w0.info.host());
  e.job.set_store_port(port);
  w0.used_ports.insert(port);
  const std::string job_uid = absl::StrCat(e.job.id(), "@", e.job.created_unix_ms());  // With the attempt: the fencing token.
  e.job.mutable_placement()->Reserve(world);
  WorkerEntry* w = nullptr;  // Slot r's worker: the slots of one worker come together (tp inside a node).
  std::set<const WorkerEntry*> given;  // Workers sent the spec: with their first order only (worker/start_specs.h).
  for (int r = 0; r < world; ++r) {
    const Slot& s = placement.slots[r];
    if (r == 0 || s.worker_id != placement.slots[r - 1].worker_id) w = &workers_[s.worker_id];
    e.ranks[r].worker_id = s.worker_id;
    e.ranks[r].local_rank = s.local_rank;
    auto* p = e.job.add_placement();
    p->set_rank(r);
    p->set_worker_id(s.worker_id);
    p->set_local_rank(s.local_rank);
    w->used_devices.insert(s.local_rank);
    v1::Assignment a;
    a.set_action(v1::Assignment::ACTION_START);
    a.set_job_id(e.job.id());
    a.set_attempt(e.job.attempt());
    a.set_rank(r);
    a.set_local_rank(s.local_rank);
    a.set_world_size(world);
    a.set_store_host(w0.info.host());
    a.set_store_port(port);
    if (given.insert(w).second) *a.mutable_spec() = spec;
    a.set_owner(e.job.owner());
    a.set_job_uid(job_uid);
    e.ranks[r].start_seq = SendLocked(*w, std::move(a));
  }
  v1::Attempt* h = e.job.add_history();
  h->set_attempt(e.job.attempt());
  h->set_started_unix_ms(absl::ToUnixMillis(Now()));
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
  if (options_.on_scheduled) options_.on_scheduled(Now() - e.queued_at);
  SetStateLocked(e, v1::JOB_STATE_SCHEDULED,
                 absl::StrCat("attempt ", e.job.attempt(), " placed",
                              e.requeue_cause.empty() ? "" : absl::StrCat(" (after: ", e.requeue_cause, ")")));
  e.requeue_cause.clear();
}

int64_t Coordinator::ClusterDevicesLocked(v1::DeviceKind kind) {
  int64_t n = 0;
  for (auto& [id, w] : workers_) {
    if (w.info.state() == v1::Worker::STATE_ALIVE && w.info.device_kind() == kind) n += w.info.device_count();
  }
  return n;
}

std::vector<FreeDevices> Coordinator::FreeDevicesLocked(v1::DeviceKind kind) {
  std::vector<FreeDevices> free;
  for (auto& [id, w] : workers_) {
    if (w.info.state() != v1::Worker::STATE_ALIVE || w.info.device_kind() != kind) continue;
    FreeDevices f{id, {}};
    for (int d = 0; d < w.info.device_count(); ++d) {
      if (!w.used_devices.count(d)) f.free_local_ranks.push_back(d);
    }
    if (!f.free_local_ranks.empty()) free.push_back(std::move(f));
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
  auto slots = PlaceJob(spec, FreeDevicesLocked(KindOf(spec)));
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
