#include "coordinator/job_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace tessera::coordinator {
namespace {

// The code says what the caller can do: RESOURCE_EXHAUSTED for a full disk, UNAVAILABLE for I/O
// errors and a busy or unopenable database (retry later), INTERNAL otherwise.
absl::Status SqlError(sqlite3* db, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", sqlite3_errmsg(db));
  switch (sqlite3_extended_errcode(db) & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(message);
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PROTOCOL:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
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

// Takes the advisory lock `path` + ".lock" (flock, held until the descriptor closes: a killed
// coordinator releases it with its process) and writes this process's id into it.
absl::StatusOr<int> LockDatabase(const std::string& db_path) {
  const std::string path = db_path + ".lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(path, ": cannot open the lock file: ", strerror(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {0};
    const ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
    close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          db_path, " is in use by another coordinator (pid ", n > 0 ? absl::StripAsciiWhitespace(pid) : "unknown",
          ", lock ", path, "); one coordinator per database"));
    }
    return absl::UnavailableError(absl::StrCat(path, ": cannot lock: ", strerror(err)));
  }
  const std::string me = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": cannot write the lock file: ", strerror(errno)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const JobStoreOptions& options) {
  auto lock = LockDatabase(options.path);
  if (!lock.ok()) return lock.status();
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(options.path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    absl::Status s = absl::UnavailableError(
        absl::StrCat(options.path, ": cannot open the job database: ", db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    close(*lock);
    return s;
  }
  std::unique_ptr<JobStore> store(new JobStore(db, *lock));
  sqlite3_busy_timeout(db, static_cast<int>(absl::ToInt64Milliseconds(options.busy_timeout)));
  for (const char* sql : {
           "PRAGMA journal_mode=WAL",
           // FULL: a commit is on disk before the RPC that made it returns (NORMAL may lose the last
           // transactions of a WAL database on power loss).
           "PRAGMA synchronous=FULL",
           "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
           "CREATE TABLE IF NOT EXISTS quarantine (id TEXT NOT NULL, quarantined_unix_ms INTEGER NOT NULL, "
           "reason TEXT NOT NULL, job BLOB)",
           "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, state INTEGER NOT NULL, "
           "created_unix_ms INTEGER NOT NULL, job BLOB NOT NULL)",
           "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state)",
           "CREATE TABLE IF NOT EXISTS worker_keys (name TEXT PRIMARY KEY, key_sha256 TEXT NOT NULL, "
           "bound_unix_ms INTEGER NOT NULL)",
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

JobStore::~JobStore() {
  sqlite3_close(db_);
  close(lock_fd_);  // Releases the lock.
}

absl::Status JobStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    sqlite3_free(err);
    return SqlError(db_, sql);
  }
  return absl::OkStatus();
}

absl::StatusOr<JobStore::Row> JobStore::RowOf(const v1::Job& job) {
  Row row;
  row.id = job.id();
  row.state = job.state();
  row.created_unix_ms = job.created_unix_ms();
  if (!job.SerializeToString(&row.job)) return absl::InternalError("cannot serialize job " + job.id());
  return row;
}

absl::Status JobStore::InsertLocked(const Row& row) {
  ++writes_;
  Statement st(db_, "INSERT OR REPLACE INTO jobs (id, state, created_unix_ms, job) VALUES (?, ?, ?, ?)");
  if (!st.ok()) return SqlError(db_, "preparing the job insert");
  sqlite3_bind_text(st.get(), 1, row.id.data(), static_cast<int>(row.id.size()), SQLITE_STATIC);
  sqlite3_bind_int(st.get(), 2, row.state);
  sqlite3_bind_int64(st.get(), 3, row.created_unix_ms);
  sqlite3_bind_blob64(st.get(), 4, row.job.data(), row.job.size(), SQLITE_STATIC);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return SqlError(db_, "storing job " + row.id);
  return absl::OkStatus();
}

absl::Status JobStore::Put(const v1::Job& job) {
  auto row = RowOf(job);
  if (!row.ok()) return row.status();
  absl::MutexLock lock(&mu_);
  return InsertLocked(*row);
}

absl::Status JobStore::PutAll(const std::vector<Row>& rows) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  for (const Row& row : rows) {
    if (absl::Status s = InsertLocked(row); !s.ok()) {
      (void)Exec("ROLLBACK");
      return s;
    }
  }
  if (absl::Status s = Exec("COMMIT"); !s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Job>> JobStore::LoadAll(std::vector<std::string>* quarantined) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> jobs;
  std::vector<std::pair<std::string, std::string>> damaged;  // (id, why)
  {
    Statement st(db_, "SELECT id, job FROM jobs ORDER BY created_unix_ms, id");
    if (!st.ok()) return SqlError(db_, "preparing the job query");
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      const unsigned char* id_text = sqlite3_column_text(st.get(), 0);
      const std::string id = id_text ? reinterpret_cast<const char*>(id_text) : "";
      v1::Job job;
      const void* data = sqlite3_column_blob(st.get(), 1);
      const int size = sqlite3_column_bytes(st.get(), 1);
      if (sqlite3_column_type(st.get(), 1) != SQLITE_BLOB || !job.ParseFromArray(data, size)) {
        damaged.push_back({id, absl::StrCat("the stored job (", size, " bytes) is not a valid Job message")});
      } else if (job.id() != id) {
        damaged.push_back({id, absl::StrCat("the stored job names itself '", absl::CEscape(job.id()), "'")});
      } else {
        jobs.push_back(std::move(job));
      }
    }
    if (rc != SQLITE_DONE) return SqlError(db_, "reading jobs");
  }
  // Each damaged row moves to the quarantine table (kept for inspection), in one transaction per row.
  for (const auto& [id, why] : damaged) {
    Statement move(db_,
                   "INSERT INTO quarantine (id, quarantined_unix_ms, reason, job) "
                   "SELECT id, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), ?, job FROM jobs "
                   "WHERE id = ?");
    Statement drop(db_, "DELETE FROM jobs WHERE id = ?");
    if (!move.ok() || !drop.ok()) return SqlError(db_, "preparing the quarantine of job " + id);
    sqlite3_bind_text(move.get(), 1, why.data(), static_cast<int>(why.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(move.get(), 2, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(drop.get(), 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
    if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    if (sqlite3_step(move.get()) != SQLITE_DONE || sqlite3_step(drop.get()) != SQLITE_DONE) {
      absl::Status s = SqlError(db_, "quarantining job " + id);
      (void)Exec("ROLLBACK");
      return s;
    }
    if (absl::Status s = Exec("COMMIT"); !s.ok()) return s;
    if (quarantined != nullptr) quarantined->push_back(absl::StrCat("job ", absl::CEscape(id), ": ", why));
  }
  return jobs;
}

absl::StatusOr<std::string> JobStore::NextJobId() {
  absl::MutexLock lock(&mu_);
  // An explicit transaction whose COMMIT is checked: the id is handed out only once the counter past
  // it is durable (before, the statement's implicit commit happened at finalisation, unchecked — a
  // failed commit handed out an id that a later start handed out again, overwriting that job).
  if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  int64_t number = 0;
  {
    Statement get(db_, "UPDATE meta SET value = value + 1 WHERE key = 'next_job_number' RETURNING value - 1");
    absl::Status s;
    if (!get.ok()) {
      s = SqlError(db_, "preparing the job id update");
    } else if (sqlite3_step(get.get()) != SQLITE_ROW) {
      s = SqlError(db_, "allocating a job id");
    } else {
      number = sqlite3_column_int64(get.get(), 0);
      if (sqlite3_step(get.get()) != SQLITE_DONE) s = SqlError(db_, "allocating a job id");
    }
    if (!s.ok()) {
      (void)Exec("ROLLBACK");
      return s;
    }
  }
  if (absl::Status s = Exec("COMMIT"); !s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return absl::StrFormat("job-%06d", number);
}

absl::StatusOr<std::map<std::string, std::string>> JobStore::LoadWorkerKeys() {
  absl::MutexLock lock(&mu_);
  Statement select(db_, "SELECT name, key_sha256 FROM worker_keys");
  if (!select.ok()) return SqlError(db_, "reading the worker keys");
  std::map<std::string, std::string> out;
  int rc;
  while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
    const auto* name = reinterpret_cast<const char*>(sqlite3_column_text(select.get(), 0));
    const auto* key = reinterpret_cast<const char*>(sqlite3_column_text(select.get(), 1));
    if (name != nullptr && key != nullptr) out[name] = key;
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "reading the worker keys");
  return out;
}

absl::Status JobStore::PutWorkerKey(const std::string& name, const std::string& key_sha256, int64_t unix_ms) {
  absl::MutexLock lock(&mu_);
  Statement put(db_, "INSERT OR REPLACE INTO worker_keys (name, key_sha256, bound_unix_ms) VALUES (?, ?, ?)");
  if (!put.ok()) return SqlError(db_, "binding a worker key");
  sqlite3_bind_text(put.get(), 1, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(put.get(), 2, key_sha256.data(), static_cast<int>(key_sha256.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(put.get(), 3, unix_ms);
  if (sqlite3_step(put.get()) != SQLITE_DONE) return SqlError(db_, "binding a worker key");
  return absl::OkStatus();
}

absl::Status JobStore::ForgetWorkerKey(const std::string& name) {
  absl::MutexLock lock(&mu_);
  Statement del(db_, "DELETE FROM worker_keys WHERE name = ?");
  if (!del.ok()) return SqlError(db_, "releasing a worker key");
  sqlite3_bind_text(del.get(), 1, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(del.get()) != SQLITE_DONE) return SqlError(db_, "releasing a worker key");
  return absl::OkStatus();
}

}  // namespace tessera::coordinator
