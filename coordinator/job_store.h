// JobStore: the coordinator's durable state in one SQLite file (WAL, synchronous=FULL: a write that
// returned OK survives power loss). Each job is stored whole (its tessera.v1.Job message) with its
// id, state and creation time as indexed columns. A coordinator killed at any moment and restarted
// loads every job it had accepted. One JobStore per database at a time, across processes: Open takes
// an exclusive advisory lock (flock on PATH.lock, which holds the owner's pid) for the store's
// lifetime; the kernel drops it when the owner dies. (flock is local to a machine: a database on a
// network file system shared by two machines is not protected.) Thread-safe: calls are serialised
// (the coordinator's StoreWriter commits batches while Submit stores a new job).
#ifndef TESSERA_COORDINATOR_JOB_STORE_H_
#define TESSERA_COORDINATOR_JOB_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tessera/v1/cluster.pb.h"

struct sqlite3;

namespace tessera::coordinator {

struct JobStoreOptions {
  std::string path;  // The SQLite file; created with its schema when missing.
  // How long a statement waits for a lock another connection holds before it fails (UNAVAILABLE).
  absl::Duration busy_timeout = absl::Seconds(5);
};

class JobStore {
 public:
  // Opens (creating) the database. Fails on an unreadable file or a schema newer than this build.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const JobStoreOptions& options);
  ~JobStore();

  // A job as stored: serialised once by whoever queues it (coordinator/store_writer.h).
  struct Row {
    std::string id;
    int state = 0;
    int64_t created_unix_ms = 0;
    std::string job;  // The serialised tessera.v1.Job.
  };
  static absl::StatusOr<Row> RowOf(const v1::Job& job);

  // Inserts or replaces `job` (by id), durably.
  absl::Status Put(const v1::Job& job);
  // Inserts or replaces every row in one transaction (one fsync): all are durable, or none.
  absl::Status PutAll(const std::vector<Row>& rows);
  // Rows written by Put and PutAll so far (successful or not): the coordinator's write rate.
  int64_t writes() const {
    absl::MutexLock lock(&mu_);
    return writes_;
  }
  // Every stored job, oldest first. A row that does not hold a valid Job message with its own id is
  // moved to the `quarantine` table and described in `quarantined` (when given) instead of failing
  // the load: one damaged row must not keep the coordinator from starting.
  absl::StatusOr<std::vector<v1::Job>> LoadAll(std::vector<std::string>* quarantined = nullptr);
  // A new job id, "job-000001", "job-000002", ... (persisted, never reused).
  absl::StatusOr<std::string> NextJobId();

  // Worker names bound to the SHA-256 of the certificate key that first registered them (with TLS):
  // name → key. PutWorkerKey binds durably (replacing), ForgetWorkerKey unbinds (an admin's release).
  absl::StatusOr<std::map<std::string, std::string>> LoadWorkerKeys();
  absl::Status PutWorkerKey(const std::string& name, const std::string& key_sha256, int64_t unix_ms);
  absl::Status ForgetWorkerKey(const std::string& name);

  static constexpr int kSchemaVersion = 1;

 private:
  JobStore(sqlite3* db, int lock_fd) : db_(db), lock_fd_(lock_fd) {}
  absl::Status Exec(const char* sql);
  absl::Status InsertLocked(const Row& row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  sqlite3* db_;
  int lock_fd_;  // Holds the exclusive lock on PATH.lock.
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_JOB_STORE_H_
