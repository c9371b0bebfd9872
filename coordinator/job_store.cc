#include "coordinator/job_store.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::coordinator {
namespace {

absl::Status SqlError(sqlite3* db, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", sqlite3_errmsg(db)));
}

// Owns a prepared statement.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Statement() { sqlite3_finalize(stmt_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const JobStoreOptions& options) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(options.path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    absl::Status s = absl::UnavailableError(
        absl::StrCat(options.path, ": cannot open the job database: ", db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<JobStore> store(new JobStore(db));
  sqlite3_busy_timeout(db, 5000);
  for (const char* sql : {
           "PRAGMA journal_mode=WAL",
           "PRAGMA synchronous=NORMAL",
           "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
           "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, state INTEGER NOT NULL, "
           "created_unix_ms INTEGER NOT NULL, job BLOB NOT NULL)",
           "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state)",
           "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', 1)",
           "INSERT OR IGNORE INTO meta (key, value) VALUES ('next_job_number', 1)",
       }) {
    if (absl::Status s = store->Exec(sql); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(options.path, ": ", s.message()));
    }
  }
  Statement version(db, "SELECT value FROM meta WHERE key = 'schema_version'");
  if (!version.ok() || sqlite3_step(version.get()) != SQLITE_ROW) return SqlError(db, "reading the schema version");
  const int v = sqlite3_column_int(version.get(), 0);
  if (v > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(options.path, ": schema version ", v,
                                                      " is newer than this coordinator's ", kSchemaVersion));
  }
  return store;
}

JobStore::~JobStore() { sqlite3_close(db_); }

absl::Status JobStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status s = absl::InternalError(absl::StrCat(sql, ": ", err ? err : "error"));
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

absl::Status JobStore::Put(const v1::Job& job) {
  std::string blob;
  if (!job.SerializeToString(&blob)) return absl::InternalError("cannot serialize job " + job.id());
  Statement st(db_, "INSERT OR REPLACE INTO jobs (id, state, created_unix_ms, job) VALUES (?, ?, ?, ?)");
  if (!st.ok()) return SqlError(db_, "preparing the job insert");
  sqlite3_bind_text(st.get(), 1, job.id().data(), static_cast<int>(job.id().size()), SQLITE_TRANSIENT);
  sqlite3_bind_int(st.get(), 2, job.state());
  sqlite3_bind_int64(st.get(), 3, job.created_unix_ms());
  sqlite3_bind_blob(st.get(), 4, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return SqlError(db_, "storing job " + job.id());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Job>> JobStore::LoadAll() {
  Statement st(db_, "SELECT id, job FROM jobs ORDER BY created_unix_ms, id");
  if (!st.ok()) return SqlError(db_, "preparing the job query");
  std::vector<v1::Job> jobs;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    v1::Job job;
    const void* data = sqlite3_column_blob(st.get(), 1);
    const int size = sqlite3_column_bytes(st.get(), 1);
    if (!job.ParseFromArray(data, size)) {
      return absl::DataLossError(absl::StrCat("job ", reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)),
                                              " in the database is not a valid Job message"));
    }
    jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "reading jobs");
  return jobs;
}

absl::StatusOr<std::string> JobStore::NextJobId() {
  Statement get(db_, "UPDATE meta SET value = value + 1 WHERE key = 'next_job_number' RETURNING value - 1");
  if (!get.ok()) return SqlError(db_, "preparing the job id update");
  if (sqlite3_step(get.get()) != SQLITE_ROW) return SqlError(db_, "allocating a job id");
  return absl::StrFormat("job-%06d", sqlite3_column_int64(get.get(), 0));
}

}  // namespace tessera::coordinator
