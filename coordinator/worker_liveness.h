// Worker liveness: each worker's last heartbeat, whether it is silent past the heartbeat timeout, how
// long the ranks of a worker declared lost may still run (its lease, then its stop grace: the fence a
// job waits out before a new attempt), and the heartbeat path that takes no coordinator-wide lock.
//
// Lock discipline. WorkerLiveness has its own lock, for its map of records; a Record's fields are
// atomics. Every method but TryFastBeat, Paths and the const readers is called under the
// coordinator's lock (which orders them); WorkerLiveness's lock is only ever taken after it, never
// before. TryFastBeat is called without the coordinator's lock, from any thread.
//
// The fast path. A heartbeat that repeats the worker's previous one applied under the coordinator's
// lock (same session, acknowledgement and listed ranks) while no job's ranks changed since
// (RanksChanged not called) would change nothing there but the worker's time: TryFastBeat renews the
// time alone. Anything else — a new session, an acknowledgement, a different list, a rank change, a
// worker declared lost — sends the heartbeat to the coordinator's lock.
#ifndef TESSERA_COORDINATOR_WORKER_LIVENESS_H_
#define TESSERA_COORDINATOR_WORKER_LIVENESS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/time/clock.h"
#include "tessera/v1/worker_service.pb.h"

namespace tessera::coordinator {

class WorkerLiveness {
 public:
  struct Options {
    // Silence after which a worker is lost.
    absl::Duration heartbeat_timeout = absl::Seconds(10);
    // Asked of workers: a worker that has not completed a heartbeat for this long stops its ranks.
    // Zero: no lease (a lost worker's ranks are taken as gone at once).
    absl::Duration worker_lease = absl::Seconds(5);
    // Not owned. Deadlines are read from Now() (monotonic).
    Clock* clock = RealClock();
    // Tests only: run by TryFastBeat between its check of the worker's session and its beat. May be empty.
    std::function<void()> before_fast_beat_for_test;
  };

  // One worker's liveness, shared by the coordinator's entry of the worker and this map (which keeps it
  // for the coordinator's life: a record is never removed).
  class Record {
   public:
    absl::Time LastHeartbeat() const { return absl::FromUnixMicros(last_heartbeat_us_.load()); }
    // The session of the live registration; -1 when lost (or never registered).
    int64_t session() const { return session_.load(); }

   private:
    friend class WorkerLiveness;
    void Beat(absl::Time t) { last_heartbeat_us_.store(absl::ToUnixMicros(t)); }
    std::atomic<int64_t> last_heartbeat_us_{0};  // Unix microseconds of the clock's Now().
    // Sequentially consistent with last_heartbeat_us_: Lost stores -1 and the caller then reads the
    // last heartbeat for the fence; TryFastBeat beats and then reads the session again. One of the
    // two sees the other.
    std::atomic<int64_t> session_{-1};
    std::atomic<int64_t> applied_seq_{-1};  // Of the heartbeat applied under the lock; -1: none yet.
    std::atomic<uint64_t> ranks_digest_{0};
    std::atomic<uint64_t> epoch_{0};  // The rank epoch after that heartbeat; 0: none (epochs start at 1).
  };

  // Heartbeats applied since the start: without the coordinator's lock, and under it.
  struct Paths {
    int64_t fast = 0;
    int64_t locked = 0;
  };

  explicit WorkerLiveness(Options options);

  // Worker `id` registered, as session `session` (> 0), with `record` (its entry's; the first
  // registration of `id` adds it to the map, a later one must pass the same record). Its heartbeat
  // counts from now; the fast path knows the session and nothing it saw yet.
  void Registered(const std::string& id, const std::shared_ptr<Record>& record, int64_t session);
  // A heartbeat applied under the coordinator's lock: the worker's time is renewed.
  void Beat(Record& record) { record.Beat(options_.clock->Now()); }
  // What a heartbeat `req` (its listed ranks' digest: RanksDigest) applied under the lock saw: a
  // repetition of it may take the fast path until RanksChanged.
  void Applied(Record& record, const v1::HeartbeatRequest& req, uint64_t digest);
  // The worker is lost: its heartbeats go to the coordinator's lock, which refuses them.
  void Lost(Record& record) { record.session_.store(-1); }
  // A change to what a heartbeat applied under the lock reads (ranks placed, gone, their states,
  // adoption): no heartbeat takes the fast path before one was applied under the lock again.
  void RanksChanged() { epoch_.fetch_add(1, std::memory_order_relaxed); }
  // The fast path (see the file comment): whether `req` was applied. Without the coordinator's lock.
  bool TryFastBeat(const v1::HeartbeatRequest& req, uint64_t digest);
  // Counts a heartbeat applied under the lock (Paths).
  void CountLockedBeat() { locked_.fetch_add(1, std::memory_order_relaxed); }
  Paths paths() const { return {fast_.load(), locked_.load()}; }

  // Time since the worker's last heartbeat.
  absl::Duration SinceBeat(const Record& record) const { return options_.clock->Now() - record.LastHeartbeat(); }
  // Silent for longer than heartbeat_timeout: lost.
  bool Silent(const Record& record) const { return SinceBeat(record) > options_.heartbeat_timeout; }
  // When every rank of a worker lost now is surely gone: its lease runs out after its last heartbeat,
  // then it stops its ranks within `stop_grace` (SIGTERM to SIGKILL) and `stop_delay` (its rounds of
  // noticing), plus kFenceSlack. InfinitePast without a lease (nothing to wait for).
  absl::Time SurelyStopped(const Record& record, absl::Duration stop_grace, absl::Duration stop_delay) const;

  // Identifies a heartbeat's list of ranks, with whether it lists them at all.
  static uint64_t RanksDigest(const v1::HeartbeatRequest& req);

  // Time beyond a lost worker's lease, stop grace and stop delay for its last ranks to be gone (a
  // SIGKILLed process exits within milliseconds; the worker's clock may run a little slower).
  static constexpr absl::Duration kFenceSlack = absl::Seconds(1);

 private:
  const Options options_;
  std::atomic<uint64_t> epoch_{1};
  std::atomic<int64_t> fast_{0};
  std::atomic<int64_t> locked_{0};
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Record>> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_WORKER_LIVENESS_H_
