#include "coordinator/job_queue.h"

#include <algorithm>
#include <set>

namespace tessera::coordinator {

void JobQueue::Push(const std::string& id, const PoolKey& pool, absl::Time now, Where where, int priority) {
  Remove(id);
  // order_ stays sorted by priority, highest first: the first place whose job has a lower priority
  // (kBack) or at most the same (kFront).
  const auto at = std::find_if(order_.begin(), order_.end(), [&](const std::string& other) {
    const int p = entries_.at(other).priority;
    return where == Where::kFront ? p <= priority : p < priority;
  });
  order_.insert(at, id);
  entries_[id] = Entry{pool, now, priority};
}

void JobQueue::Remove(const std::string& id) {
  if (entries_.erase(id) == 0) return;
  order_.erase(std::find(order_.begin(), order_.end(), id));
}

absl::Time JobQueue::QueuedAt(const std::string& id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? absl::InfinitePast() : it->second.queued_at;
}

void JobQueue::Pass(absl::Time now, const std::function<Outcome(const std::string& id, bool behind_reservation)>& offer) {
  std::set<PoolKey> reserved;  // Pools whose devices a long-waiting job holds back.
  for (auto it = order_.begin(); it != order_.end();) {
    const Entry& e = entries_.at(*it);
    const Outcome outcome = offer(*it, reserved.count(e.pool) > 0);
    if (outcome == Outcome::kPlaced) {
      entries_.erase(*it);
      it = order_.erase(it);
      continue;
    }
    if (outcome == Outcome::kWaits && now - e.queued_at > options_.backfill_limit) reserved.insert(e.pool);
    ++it;
  }
}

}  // namespace tessera::coordinator
