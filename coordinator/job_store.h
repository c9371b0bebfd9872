// JobStore: the coordinator's durable state in one SQLite file (WAL, synchronous=FULL: a write that
// returned OK survives power loss). Each job is stored whole (its tessera.v1.Job message) with its
// id, state and creation time as indexed columns. A coordinator killed at any moment and restarted
// loads every job it had accepted. One JobStore per database at a time, across processes: Open takes
// an exclusive advisory lock (flock on PATH.lock, which holds the owner's pid) for the store's
// lifetime; the kernel drops it when the owner dies. (flock is local to a machine: a database on a
// network file system shared by two machines is not protected.)
#ifndef TESSERA_COORDINATOR_JOB_STORE_H_
#define TESSERA_COORDINATOR_JOB_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tessera/v1/cluster.pb.h"

struct sqlite3;

namespace tessera::coordinator {

struct JobStoreOptions {
  std::string path;  // The SQLite file; created with its schema when missing.
};

class JobStore {
 public:
  // Opens (creating) the database. Fails on an unreadable file or a schema newer than this build.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const JobStoreOptions& options);
  ~JobStore();

  // Inserts or replaces `job` (by id), durably.
  absl::Status Put(const v1::Job& job);
  // Rows written by Put so far (successful or not): the coordinator's write rate.
  int64_t writes() const { return writes_; }
  // Every stored job, oldest first. A row that does not hold a valid Job message with its own id is
  // moved to the `quarantine` table and described in `quarantined` (when given) instead of failing
  // the load: one damaged row must not keep the coordinator from starting.
  absl::StatusOr<std::vector<v1::Job>> LoadAll(std::vector<std::string>* quarantined = nullptr);
  // A new job id, "job-000001", "job-000002", ... (persisted, never reused).
  absl::StatusOr<std::string> NextJobId();

  static constexpr int kSchemaVersion = 1;

 private:
  JobStore(sqlite3* db, int lock_fd) : db_(db), lock_fd_(lock_fd) {}
  absl::Status Exec(const char* sql);

  sqlite3* db_;
  int lock_fd_;  // Holds the exclusive lock on PATH.lock.
  int64_t writes_ = 0;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_JOB_STORE_H_
