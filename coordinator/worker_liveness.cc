#include "coordinator/worker_liveness.h"

#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace tessera::coordinator {

WorkerLiveness::WorkerLiveness(Options options) : options_(std::move(options)) {}

void WorkerLiveness::Registered(const std::string& id, const std::shared_ptr<Record>& record, int64_t session) {
  Beat(*record);
  record->applied_seq_.store(-1);
  record->epoch_.store(0);
  record->session_.store(session);
  absl::MutexLock lock(&mu_);
  records_.try_emplace(id, record);
}

void WorkerLiveness::Applied(Record& record, const v1::HeartbeatRequest& req, uint64_t digest) {
  record.applied_seq_.store(req.applied_seq());
  record.ranks_digest_.store(digest);
  record.epoch_.store(epoch_.load());
}

bool WorkerLiveness::TryFastBeat(const v1::HeartbeatRequest& req, uint64_t digest) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = records_.find(req.worker_id());
  if (it == records_.end()) return false;
  Record& r = *it->second;
  const int64_t session = r.session_.load();
  if (session < 0) return false;  // Lost: refused under the coordinator's lock.
  if (req.session() != 0) {
    // The epoch first: a change under the coordinator's lock after this load makes the heartbeat one
    // that came before it.
    const uint64_t epoch = epoch_.load();
    if (req.session() != session || req.applied_seq() != r.applied_seq_.load() || r.epoch_.load() != epoch ||
        digest != r.ranks_digest_.load()) {
      return false;
    }
  }
  if (options_.before_fast_beat_for_test) options_.before_fast_beat_for_test();
  Beat(r);
  // The worker may have been declared lost since the load above, its fence taken from the heartbeat
  // before this one: then this one must not renew its lease (its OK would). Beat first, then look
  // again (both sequentially consistent): either the session is still live here, and the fence, read
  // after the loss was stored, includes this beat; or it is -1, and this heartbeat goes to the path
  // under the coordinator's lock, which refuses it.
  if (r.session_.load() != session) return false;
  fast_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

absl::Time WorkerLiveness::SurelyStopped(const Record& record, absl::Duration stop_grace,
                                         absl::Duration stop_delay) const {
  if (options_.worker_lease <= absl::ZeroDuration()) return absl::InfinitePast();
  return record.LastHeartbeat() + options_.worker_lease + stop_grace + stop_delay + kFenceSlack;
}

uint64_t WorkerLiveness::RanksDigest(const v1::HeartbeatRequest& req) {
  uint64_t h = absl::HashOf(req.reports_ranks(), req.ranks_size());
  for (const v1::RunningRank& r : req.ranks()) {
    h = absl::HashOf(h, absl::string_view(r.job_id()), r.attempt(), r.rank(), r.device());
  }
  return h;
}

}  // namespace tessera::coordinator
