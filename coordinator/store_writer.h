// StoreWriter: the coordinator's durable job writes, group-committed on a thread of their own, so that
// no SQLite I/O happens under the coordinator's state lock.
//
// Contract. Put (called under the coordinator's lock) serialises the job and queues its row, replacing
// a queued older row of the same job, and returns a ticket: tickets increase with every Put. The
// writer's thread takes everything queued and stores it in one transaction (one fsync for the batch).
// durable() is the largest ticket T such that every row queued with a ticket ≤ T is on disk or was
// replaced by a newer row that is. An action that must not precede its row's durability (write-ahead:
// an attempt's START orders carry its number, the fencing token, which a restarted coordinator must
// never hand out again) waits for durable() ≥ its ticket; on_durable tells the coordinator when
// durable() moved. A batch that fails is retried after retry_after (its rows stay queued unless a
// newer row replaced them); Wait reports the failure to whoever waits for one of its tickets.
#ifndef TESSERA_COORDINATOR_STORE_WRITER_H_
#define TESSERA_COORDINATOR_STORE_WRITER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/job_store.h"
#include "tessera/v1/cluster.pb.h"

namespace tessera::coordinator {

struct StoreWriterOptions {
  JobStore* store = nullptr;  // Not owned; outlives the writer.
  // Called on the writer's thread, holding none of the writer's locks, after durable() moved forward.
  // May take the coordinator's lock (which Put's callers hold: Put never waits for this thread's I/O).
  std::function<void()> on_durable;
  absl::Duration retry_after = absl::Seconds(1);  // Between a failed batch and its next try.
};

class StoreWriter {
 public:
  explicit StoreWriter(StoreWriterOptions options);
  // Stop(), if not yet.
  ~StoreWriter();
  // Stores what is queued (one more try if a batch fails), then stops the thread; later Puts are
  // not stored. on_durable may still be called during it (the writer is fully usable until it returns).
  void Stop();
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  // Queues `job`'s row; returns its ticket (≥ 1). Never blocks on I/O.
  uint64_t Put(const v1::Job& job);
  uint64_t durable() const { return durable_.load(std::memory_order_acquire); }
  // Waits until `ticket` is durable and on_durable has returned for it (OK), the batch that held it
  // failed (that error; its row is tried again later), or `timeout` passed (DeadlineExceeded).
  absl::Status Wait(uint64_t ticket, absl::Duration timeout);
  // The newest ticket handed out (0: none).
  uint64_t last_ticket() const;
  // Transactions committed, and batches that failed, so far.
  int64_t commits() const;
  int64_t failures() const;

 private:
  struct Queued {
    JobStore::Row row;
    uint64_t ticket = 0;
  };
  void Run();

  const StoreWriterOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar work_;  // Something queued, or stopping.
  absl::CondVar done_;  // A batch ended.
  std::map<std::string, Queued> queued_ ABSL_GUARDED_BY(mu_);  // By job id: the newest row only.
  uint64_t last_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t attempted_ ABSL_GUARDED_BY(mu_) = 0;  // The largest ticket of a batch tried so far.
  uint64_t announced_ ABSL_GUARDED_BY(mu_) = 0;  // durable() as of the last on_durable that returned.
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);  // Of the newest failed batch.
  int64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> durable_{0};
  std::thread thread_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_STORE_WRITER_H_
