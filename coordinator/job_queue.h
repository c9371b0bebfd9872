// The queue of jobs waiting to be placed, and its policy: the order in which a scheduling pass
// considers them, and backfill — when a later job may be placed ahead of an earlier one that does
// not fit.
//
// Policy. Higher priorities first (a spec's scheduling.priority, spec/priority.h); within one
// priority first come, first served, but a job whose attempt ended and that waits for its next one
// goes to the front of its priority (Where::kFront). A job that does not fit lets later ones of its device kind and
// pool that do fit go first, until it has waited longer than backfill_limit: from then on, nothing
// behind it in its pool is placed before it, so that a large job is not starved by a stream of small
// ones. A job larger than every live device of its pool together (Outcome::kNeverFits) or held back
// by its own earlier attempt (Outcome::kHeld) reserves nothing.
//
// What fits, and where, is the caller's (placement.h, over the free devices); the queue never reads a
// spec. Not thread-safe: the coordinator calls it under its lock.
#ifndef TESSERA_COORDINATOR_JOB_QUEUE_H_
#define TESSERA_COORDINATOR_JOB_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "coordinator/free_device_index.h"

namespace tessera::coordinator {

struct JobQueueOptions {
  // How long a job that fits its pool but finds no room lets later jobs of its pool go first.
  absl::Duration backfill_limit = absl::Minutes(10);
};

class JobQueue {
 public:
  explicit JobQueue(JobQueueOptions options) : options_(options) {}

  enum class Where {
    kBack,   // A new job (submitted, or recovered at a coordinator's start).
    kFront,  // A job whose attempt ended and that waits for its next one.
  };
  // Job `id`, asking for devices of `pool` at `priority`, waits from `now` (its wait for backfill
  // counts from there): after the queued jobs of its priority or higher (kBack), or before those of
  // its priority or lower (kFront). A job already queued is moved.
  void Push(const std::string& id, const PoolKey& pool, absl::Time now, Where where, int priority);
  // Takes job `id` out (cancelled); nothing if it is not queued.
  void Remove(const std::string& id);
  bool Contains(const std::string& id) const { return entries_.count(id) > 0; }
  // When job `id` entered the queue (InfinitePast if it is not queued).
  absl::Time QueuedAt(const std::string& id) const;
  bool empty() const { return order_.empty(); }
  size_t size() const { return order_.size(); }
  // The queued ids in the order a pass considers them.
  const std::deque<std::string>& ids() const { return order_; }

  // What the caller did with a job a pass offered it.
  enum class Outcome {
    kPlaced,     // Its attempt started: it leaves the queue.
    kWaits,      // It fits its pool but was not placed now (no room, or behind a reservation).
    kNeverFits,  // Larger than every live device of its pool together: it reserves nothing.
    kHeld,       // Held back by its own earlier attempt (a fence, a rank still stopping).
  };
  // One scheduling pass: offers each queued job in order to `offer(id, behind_reservation)`, where
  // behind_reservation says an earlier job of its pool has waited past backfill_limit and holds the
  // pool's devices (the caller must then not place it: Outcome::kWaits). `offer` may read the queue
  // (QueuedAt) but must not change it.
  void Pass(absl::Time now, const std::function<Outcome(const std::string& id, bool behind_reservation)>& offer);

 private:
  struct Entry {
    PoolKey pool;
    absl::Time queued_at;
    int priority = 0;
  };
  const JobQueueOptions options_;
  std::deque<std::string> order_;
  absl::flat_hash_map<std::string, Entry> entries_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_JOB_QUEUE_H_
