// Coordinator: the cluster's state machine — jobs, workers, the queue (job_queue.h), placement,
// attempts and restarts. Transport-free: the gRPC handlers (coordinator_service.h, worker_service.h)
// call it.
//
// Job states: PENDING → SCHEDULED → RUNNING → SUCCEEDED | FAILED | CANCELLED. When a rank exits with
// an error or its worker is lost, every rank of the attempt is stopped; with restarts left the job is
// RESTARTING until they are gone, then PENDING again (its next attempt resumes from the newest
// checkpoint); without, FAILED with the cause. Thread-safe.
#ifndef TESSERA_COORDINATOR_COORDINATOR_H_
#define TESSERA_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "spec/paths.h"
#include "common/time/clock.h"
#include "coordinator/free_device_index.h"
#include "coordinator/job_entry.h"
#include "coordinator/job_queue.h"
#include "coordinator/scheduling_policy.h"
#include "coordinator/job_store.h"
#include "coordinator/stopping_ranks.h"
#include "coordinator/store_writer.h"
#include "coordinator/worker_keys.h"
#include "coordinator/worker_liveness.h"
#include "coordinator/worker_orders.h"
#include "tessera/v1/cluster.pb.h"
#include "tessera/v1/coordinator_service.pb.h"
#include "tessera/v1/worker_service.pb.h"

namespace tessera::coordinator {

struct CoordinatorOptions {
  absl::Duration heartbeat_interval = absl::Seconds(1);  // Asked of workers.
  absl::Duration heartbeat_timeout = absl::Seconds(10);  // Silence after which a worker is lost.
  // Asked of workers (RegisterWorkerResponse.lease_ms): a worker that has not completed a heartbeat for
  // this long stops its ranks. Below heartbeat_timeout. A lost worker's jobs get no new attempt before
  // its last heartbeat + lease + its stop grace + its stop delay + WorkerLiveness::kFenceSlack: by then
  // its ranks are surely gone.
  // Zero: no lease (and no such wait).
  absl::Duration worker_lease = absl::Seconds(5);
  int max_restarts_limit = 100;                          // Largest max_restarts a job may ask.
  // A worker name stays with its live worker: another process registering the name is refused while
  // the holder heartbeated within this time (a restarted worker waits at most this long).
  absl::Duration name_hold = absl::Seconds(3);
  // An attempt whose ranks have not all reported STARTED this long after placement (an assignment
  // lost, a worker that cannot start processes) fails and is retried, spending a restart.
  absl::Duration start_timeout = absl::Minutes(2);
  // A RUNNING attempt that reports no new step for this long (counted from its start, then from its
  // newest step) is hung — a rank stuck without a collective to time out, e.g. a one-rank job — and
  // fails (spending a restart). Longer than the slowest legitimate gap: start-up, a checkpoint, an
  // evaluation. Zero: never.
  absl::Duration progress_timeout = absl::Minutes(30);
  // A rank of an earlier attempt that a live worker still lists this long after it was superseded (its
  // SIGTERM and SIGKILL did not end it: a process stuck in the kernel, a device that hangs) is given up
  // on: it no longer holds its job back (the next attempt is placed elsewhere; its fencing token keeps
  // the old rank from writing), and its device stays out of placement — quarantined, with the reason
  // shown by `tessera workers` — until the worker stops listing the rank (or registers again). Above
  // any worker's stop grace. Zero: never (the job waits for the rank as long as it is listed).
  absl::Duration unkillable_rank_timeout = absl::Minutes(2);
  // Backfill: later jobs that fit may be placed before an earlier one that does not, until it has
  // waited this long; from then on, nothing behind it (same device kind) is placed before it.
  absl::Duration backfill_limit = absl::Minutes(10);
  // Who may ask for which priority (--policy; scheduling_policy.h). The default, without a file:
  // every owner any priority. With one, Submit refuses an owner in no team or a priority above the
  // team's max_priority (PermissionDenied naming it).
  SchedulingPolicy policy;
  // Called (under the coordinator's lock: keep it short) with the time a job waited in the queue
  // before its ranks were placed. May be empty.
  std::function<void(absl::Duration)> on_scheduled;
  // Where jobs may read and write (spec/paths.h). Empty: not confined (a loopback cluster
  // without TLS). Set: every path of a submitted job is absolute, normalised and inside them (outputs
  // inside OUTPUT_ROOT/OWNER for a job with an owner), also after resolving symbolic links on this
  // machine; logs are read only from inside the output root.
  spec::PathRoots roots;
  // Where every job state change goes, one line each — placements, attempt ends, restarts, requeues,
  // ends — with its reason (the daemon: stderr, so that its journal tells each job's story). Called
  // under the coordinator's lock. May be empty.
  std::function<void(const std::string& line)> on_transition;
  // The clock of every deadline above (common/time/clock.h); tests pass a FakeClock. Not owned.
  Clock* clock = RealClock();
  // Tests only: run by a heartbeat's path without the lock between its check of the worker's session
  // and its beat (where CheckLiveness may declare the worker lost). May be empty.
  std::function<void()> before_fast_beat_for_test;
};

class Coordinator {
 public:
  Coordinator(CoordinatorOptions options, std::unique_ptr<JobStore> store);
  // Stores every change made so far (coordinator/store_writer.h) before it returns.
  ~Coordinator();

  // Loads the stored jobs. A job whose ranks were placed when the previous coordinator stopped keeps
  // its attempt: when its workers register again listing those ranks as running, it carries on; ranks
  // not reported within heartbeat_timeout are treated as gone, and the job restarts from its newest
  // checkpoint without spending one of its restarts.
  absl::Status Recover();

  // Client side. Submit validates the spec (InvalidArgument, one "field: reason" per line).
  // `owner` is recorded as Job.owner.
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec, int max_restarts, const std::string& owner = "");
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  std::vector<v1::Job> ListJobs();  // Newest first.
  // One page of ListJobs(): at most `page_size` jobs older than the one named `after` (empty: from
  // the newest); *next is the last one's id when more follow, else empty.
  // `owner`, when given, keeps only that user's jobs.
  std::vector<v1::Job> ListJobsPage(int page_size, const std::string& after, std::string* next,
                                    const std::string* owner = nullptr);
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  // Waits until job `id` has a version newer than `seen` (or `timeout`); returns it and its version.
  absl::StatusOr<std::pair<v1::Job, uint64_t>> WaitForJobChange(const std::string& id, uint64_t seen,
                                                                absl::Duration timeout);
  std::vector<v1::Worker> ListWorkers();
  // How `spec` would be placed on the devices free now (placeable_now false with the reason if not).
  absl::StatusOr<v1::PlanJobResponse> Plan(const v1::JobSpec& spec);
  // The path of a file in job `id`'s output directory (`relative`: a name of the coordinator's, never
  // from a request), where the coordinator reads it; FailedPrecondition when it lies outside
  // --output_root (logs and step charts are served only from inside it).
  absl::StatusOr<std::string> JobOutputPath(const std::string& id, const std::string& relative);
  // Bytes of rank `rank`'s log of job `id` from `offset` (negative: from the end).
  absl::StatusOr<v1::GetJobLogsResponse> Logs(const std::string& id, int rank, int64_t offset, int max_bytes);

  // Worker identity with TLS (coordinator/worker_keys.h): the worker service checks and binds names'
  // certificate keys there; an admin's release too.
  WorkerKeys& worker_keys() { return keys_; }

  // Worker side.
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(const v1::RegisterWorkerRequest& request);
  // `session` (0: not checked) must be the worker's newest registration's.
  absl::Status Heartbeat(const std::string& worker_id, int64_t session = 0);
  // The same, with the worker's acknowledgement (applied_seq) and, with reports_ranks, its ranks:
  // acknowledged orders are forgotten, and ranks of live attempts whose start is acknowledged and
  // that the worker does not list are gone (their attempt fails and restarts).
  // A heartbeat that repeats the worker's previous one (same session, acknowledgement and ranks) while
  // no job's ranks changed takes no coordinator-wide lock: it only renews the worker's time.
  absl::Status Heartbeat(const v1::HeartbeatRequest& request);
  // The next start/stop order for the worker, waiting up to `timeout`; nullopt when none came.
  // `session` (from RegisterWorker; 0: any) must be the worker's newest, and `stream` (from
  // StreamOpened; 0: any) its newest stream: an older one gets FailedPrecondition and takes nothing.
  // An order given stays with the coordinator until the worker acknowledges it (Heartbeat).
  absl::StatusOr<std::optional<v1::Assignment>> NextAssignment(const std::string& worker_id,
                                                               absl::Duration timeout, int64_t session = 0,
                                                               int64_t stream = 0);
  // A new assignment stream of `session` opens: the orders given to earlier streams of the session
  // and not acknowledged go first again, in order (a reconnect may have lost them in flight). Orders of
  // an older session are not resent: the registration's reconciliation covers them. Returns the
  // stream's number for NextAssignment (0 if `session` is not the worker's newest); earlier streams end.
  int64_t StreamOpened(const std::string& worker_id, int64_t session);
  // The same for a pushed stream: opens it (as StreamOpened) and delivers to `sink` every order, the
  // waiting ones at once; returns its number, or NotFound (worker unknown or lost) /
  // FailedPrecondition (`session` not the newest; 0: any), and then `sink` is not attached.
  // An attached sink stays until End is called on it or DetachAssignmentSink(its number) returns.
  absl::StatusOr<int64_t> AttachAssignmentSink(const std::string& worker_id, int64_t session, AssignmentSink* sink);
  void DetachAssignmentSink(const std::string& worker_id, int64_t stream);
  absl::Status ReportRankStatus(const v1::ReportRankStatusRequest& request);

  // Marks workers silent for longer than heartbeat_timeout as lost and fails their attempts.
  void CheckLiveness();

  // Counts for metrics.
  std::map<v1::JobState, int> JobsByState();
  int64_t StoreWrites();  // Job rows written to the database since the start.
  // Job changes are stored by a writer thread, group-committed (coordinator/store_writer.h); orders
  // that depend on a change (an attempt's START orders) leave only once it is durable. This waits
  // until every change made so far is durable (tests, benchmarks); the error of a failed write.
  absl::Status WaitForStore(absl::Duration timeout = absl::Seconds(30));
  // Recomputes the indexes that scheduling reads (free devices by worker, stopping ranks by job) from
  // the workers themselves and says where they differ, and names a job that made a state change the
  // job state machine does not allow (job_entry.h). Tests call it after their events.
  absl::Status VerifyIndexes();
  std::map<v1::Worker::State, int> WorkersByState();
  // Heartbeats applied since the start: without the coordinator's lock (repeating the worker's previous
  // one), and under it.
  using HeartbeatPaths = WorkerLiveness::Paths;
  HeartbeatPaths HeartbeatsByPath() const { return liveness_.paths(); }

 private:
  // A change to what reconciliation reads (ranks placed, gone, states, adoption): no heartbeat after
  // it takes the fast path before one was applied under mu_.
  void RanksChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { liveness_.RanksChanged(); }
  // Job `e`'s attempt is no longer being adopted (reconciliation reads that, so: RanksChangedLocked).
  void EndAdoptionLocked(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    e.adopt_deadline.reset();
    RanksChangedLocked();
  }

  struct WorkerEntry {
    v1::Worker info;
    // Shared with liveness_ (the fast heartbeat path), which keeps it for the coordinator's life.
    std::shared_ptr<WorkerLiveness::Record> live = std::make_shared<WorkerLiveness::Record>();
    int port_min = 0;
    int port_max = -1;
    int next_port = 0;  // Where the search for a free store port starts (round robin).
    // Its orders in its newest session: numbered, held for the store, streamed, kept until
    // acknowledged (coordinator/worker_orders.h).
    WorkerOrders orders;

    std::set<int> used_devices;
    // Ranks this worker still runs (or has not reported the exit of) that belong to no current
    // attempt, and those of them quarantined (coordinator/stopping_ranks.h).
    StoppingRanks stopping;
    std::set<int> used_ports;
    int64_t session = 0;  // Of the newest registration.
    std::string instance;  // The worker process that registered it (RegisterWorkerRequest.instance).
    int64_t attempt = 0;   // Its RegisterWorkerRequest.attempt.
    absl::Duration stop_grace = absl::Seconds(10);  // Its RegisterWorkerRequest.stop_grace_ms.
    absl::Duration stop_delay = kDefaultStopDelay;  // Its RegisterWorkerRequest.stop_delay_ms.
  };
  // A worker's stop delay when it states none (an older worker): two 3 s calls and two rounds, rounded up.
  static constexpr absl::Duration kDefaultStopDelay = absl::Seconds(7);

  void TryScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why job `e` may not get a new attempt now although it fits: a lost worker's fence has not ended,
  // or a live worker still runs (is stopping) a rank of an earlier attempt; "" when nothing holds it.
  // `stopping_jobs`: the jobs with ranks in a live worker's `stopping`.
  std::string FencedLocked(JobEntry& e, const std::map<std::string, std::string>& stopping_jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Job id → a live worker that still runs (stops) a superseded rank of it.
  std::map<std::string, std::string> StoppingJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether ranks of job `e` may still be alive anywhere (its output directory stays reserved).
  bool RanksMayLiveLocked(const JobEntry& e, const std::map<std::string, std::string>& stopping_jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TryScheduleLocked's parts: the store port of a new attempt's rank 0 on `w0` (-1: none free), and
  // the attempt started on `placement`: ranks assigned, START orders sent, history, SCHEDULED.
  int NextStorePortLocked(WorkerEntry& w0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartAttemptLocked(JobEntry& e, const struct Placement& placement, int port) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RegisterWorker's steps: a live worker holding the name or a late duplicate of an accepted
  // registration refuses it; the accepted worker's entry starts a new session; the exits it brings
  // are applied and its listed ranks adopted or stopped; ranks it should run but does not list are gone.
  absl::Status RefusedRegistrationLocked(const v1::RegisterWorkerRequest& req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WorkerEntry& AcceptWorkerLocked(const v1::RegisterWorkerRequest& req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyListedRanksLocked(WorkerEntry& w, const v1::RegisterWorkerRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReconcileRegistrationLocked(const std::string& id, const v1::RegisterWorkerRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The entry of listed rank `r` if it is a rank of its job's current attempt (the job not ended)
  // placed on worker `id`, with its job in `job`; else null.
  RankEntry* PlacedHereLocked(const std::string& id, const v1::RunningRank& r, JobEntry** job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the worker's `stopping` from the ranks it lists (registration or heartbeat); whether it
  // changed (the worker's used devices must be recounted: a device taken, or free again).
  bool NoteStoppingLocked(const std::string& id, const google::protobuf::RepeatedPtrField<v1::RunningRank>& listed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `counts`: whether the failure spends one of the job's restarts (false for ranks lost to a
  // coordinator restart rather than to the job).
  // `failed_worker`: the worker whose rank, registration or silence ended the attempt ("" if none).
  void AttemptFailedLocked(JobEntry& e, const std::string& reason, bool counts = true,
                           const std::string& failed_worker = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the current attempt's entry in the job's history (once).
  void EndAttemptLocked(JobEntry& e, v1::JobState outcome, const std::string& reason,
                        const std::string& failed_worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Which failed attempt a late blame may still move to another worker.
  enum class BlameScope {
    kRecentFailure,   // The job's last attempt, if it failed within two heartbeat timeouts.
    kAdoptedAttempt,  // The attempt this coordinator adopted at its start, however long ago it failed
                      // (the adoption deadline is itself two heartbeat timeouts after the start).
  };
  // An attempt that failed is blamed on `worker_id`, one of its workers, found lost, never back, or
  // without one of its ranks unreported afterwards: a peer that vanished is seen first as a failed
  // collective on a healthy node, whose report ended the attempt.
  void BlameWorkerLocked(JobEntry& e, const std::string& worker_id, const std::string& why,
                         BlameScope scope = BlameScope::kRecentFailure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr int kMaxHistory = 128;  // Attempts kept in a job's history.
  // How long a client's transition (Cancel) waits for its row to be durable before it fails.
  static constexpr absl::Duration kClientWriteWait = absl::Seconds(30);
  void CheckAdoptionLocked(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails a SCHEDULED attempt whose ranks did not all start within start_timeout.
  void CheckStartLocked(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails a RUNNING attempt without a new step for progress_timeout.
  void CheckProgressLocked(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The devices a job asks for: its device kind and placement.pool (free_index_'s key).
  static PoolKey PoolOf(const v1::JobSpec& spec);
  // Its queue priority: scheduling.priority (valid in a queued spec; normal otherwise).
  static int PriorityOf(const v1::JobSpec& spec);
  absl::Status ReportRankStatusLocked(const v1::ReportRankStatusRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopRanksLocked(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Numbers `a` in the worker's session and queues it, to leave once ticket `after` is durable;
  // returns its seq.
  int64_t SendLocked(WorkerEntry& w, v1::Assignment a, uint64_t after = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The StoreWriter made more changes durable: held orders leave.
  void OnStoreDurable();
  // A new stream of the worker's session: the previous one (pushed or pulled) ends, orders not
  // acknowledged are queued first again; returns the stream's number.
  int64_t OpenStreamLocked(WorkerEntry& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reconciliation: ranks of live attempts placed on worker `id` that are not in `listed` and whose
  // start order has seq <= `up_to_seq` are gone; their attempts fail with the reason "worker NAME
  // `seen` rank R of attempt A `hint`". Returns whether any rank was gone.
  bool ReconcileLocked(const std::string& id, const std::set<std::tuple<std::string, int, int>>& listed,
                       int64_t up_to_seq, const std::string& seen, const std::string& hint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RankGoneLocked(JobEntry& e, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AfterRankExitLocked(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Both persist (SetStateLocked always; ChangedLocked when asked, or every 2 s): the job's row goes to
  // the StoreWriter (e.ticket), which logs and retries a failed write; a transition a client asked
  // for waits for e.ticket after the lock, so that its RPC fails when the change is not durable.
  // A job waiting in the queue (PENDING) with `reason`: stored when it becomes PENDING; later changes
  // of the reason alone (it names free devices, which change with every placement and exit) are not
  // stored — a restarted coordinator computes them again — so that an event does not rewrite and
  // fsync every waiting job's row under the lock.
  void WaitingLocked(JobEntry& e, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStateLocked(JobEntry& e, v1::JobState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChangedLocked(JobEntry& e, bool persist) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Take job `e`'s ranks out of ranks_on_ (before e.ResetRanks), and put them in (once their workers are set).
  void UnindexRanksLocked(const JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IndexRanksLocked(const JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The jobs with ranks placed on worker `worker_id` (ranks_on_), and job `job_id`'s ranks there: copies,
  // so that the caller may change the index while it walks them.
  std::vector<std::string> JobsOnLocked(const std::string& worker_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> RanksOnLocked(const std::string& worker_id, const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recounts the used devices and ports of every worker, or of worker `*only`.
  void RefreshWorkerUsageLocked(const std::string* only = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The free devices of live workers of `key` (kind, pool), most free first, as many workers as placing
  // `world` ranks in tp groups of `group` reads (placement.h PlacementPrefix): not every worker.
  std::vector<struct FreeDevices> FreeDevicesLocked(const PoolKey& key, int64_t world, int group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where `spec`'s ranks go on the free devices now (ResourceExhausted with the reason if they do not fit).
  absl::StatusOr<struct Placement> PlaceLocked(const v1::JobSpec& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings worker `w`'s entry in free_index_ up to date: after every change of its state, devices or
  // used devices.
  void ReindexLocked(WorkerEntry& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds (or removes) the jobs of worker `w`'s `stopping` ranks to (from) stopping_index_: while it is
  // alive they are in it, but for the quarantined ones.
  void IndexStoppingLocked(const WorkerEntry& w, bool add) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Quarantines worker `w`'s `stopping` ranks listed for unkillable_rank_timeout or longer (see there);
  // whether one was (its job may be placed now).
  bool QuarantineOverdueLocked(WorkerEntry& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Time Now() const { return options_.clock->Now(); }          // Deadlines (monotonic).
  absl::Time WallNow() const { return options_.clock->WallNow(); }  // Timestamps shown and kept.

  const CoordinatorOptions options_;
  std::unique_ptr<JobStore> store_;
  WorkerKeys keys_;  // Its own lock; never taken under mu_.
  // Job rows, stored off mu_ (created after store_, destroyed first: ~Coordinator).
  std::unique_ptr<StoreWriter> writer_;
  absl::Mutex submit_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // Held by Submit from its overlap check to its insert.
  absl::Mutex mu_;
  absl::CondVar changed_;
  // Ids in the order they were handed out: "job-999999" before "job-1000000" (shorter first).
  struct JobIdLess {
    bool operator()(const std::string& a, const std::string& b) const {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    }
  };
  std::map<std::string, JobEntry, JobIdLess> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, WorkerEntry> workers_ ABSL_GUARDED_BY(mu_);
  // Worker id → job id → the job's ranks (JobEntry::ranks, exited or not) placed on that worker, in
  // the order of jobs_: what a worker's registration, reconciliation or loss walks instead of every
  // rank of every job. Kept by UnindexRanksLocked / IndexRanksLocked around every ResetRanks.
  std::map<std::string, std::map<std::string, std::vector<int>, JobIdLess>> ranks_on_ ABSL_GUARDED_BY(mu_);
  // PENDING jobs, in the order scheduling considers them, with backfill (coordinator/job_queue.h).
  JobQueue queue_ ABSL_GUARDED_BY(mu_);
  uint64_t version_counter_ ABSL_GUARDED_BY(mu_) = 0;
  // Sessions count up from the start time, so that none repeats one of a previous coordinator process.
  int64_t last_session_ ABSL_GUARDED_BY(mu_) = absl::ToUnixMicros(absl::Now());
  // While a registration applies the worker's exits and reconciles its ranks, nothing is placed:
  // an attempt placed in between (on the worker just registered) would be "missing" from the
  // registration's own list of running ranks and fail at once, its start order left in the queue.
  bool defer_scheduling_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_stream_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> held_workers_ ABSL_GUARDED_BY(mu_);  // Workers with an order held for the store.
  // Live workers' free devices per device kind and pool, in PlaceRanks' order, and the totals:
  // placement and the queue's reasons read no worker they do not use.
  FreeDeviceIndex free_index_ ABSL_GUARDED_BY(mu_);
  // Job id → the live workers still running (stopping) a superseded rank of it.
  std::map<std::string, std::set<std::string>> stopping_index_ ABSL_GUARDED_BY(mu_);
  // Every worker's last heartbeat, the fast heartbeat path and the fences of lost workers
  // (coordinator/worker_liveness.h). Its own lock, taken after mu_ (never before).
  WorkerLiveness liveness_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_COORDINATOR_H_
