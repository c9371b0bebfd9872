// JobStore: the coordinator's durable state in one SQLite file (WAL). Each job is stored whole (its
// tessera.v1.Job message) with its id, state and creation time as indexed columns. A coordinator
// killed at any moment and restarted loads every job it had accepted.
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
  // Every stored job, oldest first.
  absl::StatusOr<std::vector<v1::Job>> LoadAll();
  // A new job id, "job-000001", "job-000002", ... (persisted, never reused).
  absl::StatusOr<std::string> NextJobId();

  static constexpr int kSchemaVersion = 1;

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql);

  sqlite3* db_;
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_JOB_STORE_H_
