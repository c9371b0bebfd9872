#include "coordinator/job_store.h"
#include "coordinator/small_tmpfs.h"

#include <signal.h>
#include <sys/mount.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <map>
#include <string>

#include "absl/strings/str_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

std::string DbPath(const std::string& name) {
  std::string dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
  std::filesystem::remove(dir + "/" + name);
  return dir + "/" + name;
}

TEST(JobStoreTest, JobsAndIdsSurviveReopening) {
  const std::string path = DbPath("jobs.db");
  {
    auto store = JobStore::Open({path});
    ASSERT_TRUE(store.ok()) << store.status();
    auto id1 = (*store)->NextJobId();
    auto id2 = (*store)->NextJobId();
    ASSERT_TRUE(id1.ok() && id2.ok());
    EXPECT_EQ(*id1, "job-000001");
    EXPECT_EQ(*id2, "job-000002");
    v1::Job job;
    job.set_id(*id1);
    job.set_state(v1::JOB_STATE_RUNNING);
    job.mutable_spec()->set_name("a");
    job.set_created_unix_ms(10);
    ASSERT_TRUE((*store)->Put(job).ok());
    job.set_state(v1::JOB_STATE_SUCCEEDED);  // Replaces.
    ASSERT_TRUE((*store)->Put(job).ok());
  }
  auto store = JobStore::Open({path});
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(jobs->at(0).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(jobs->at(0).spec().name(), "a");
  EXPECT_EQ(*(*store)->NextJobId(), "job-000003");  // Never reused.
}

// Worker names' keys (WorkerKeys::Bind) are durable: a coordinator restart does not free a name for
// another certificate; a release is durable too.
TEST(JobStoreTest, WorkerKeysSurviveReopeningAndAReleaseToo) {
  const std::string path = DbPath("keys.db");
  {
    auto store = JobStore::Open({path});
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutWorkerKey("node-a", std::string(64, 'a'), 1).ok());
    ASSERT_TRUE((*store)->PutWorkerKey("node-b", std::string(64, 'b'), 2).ok());
  }
  {
    auto store = JobStore::Open({path});
    ASSERT_TRUE(store.ok()) << store.status();
    auto keys = (*store)->LoadWorkerKeys();
    ASSERT_TRUE(keys.ok()) << keys.status();
    EXPECT_EQ(*keys, (std::map<std::string, std::string>{{"node-a", std::string(64, 'a')}, {"node-b", std::string(64, 'b')}}));
    ASSERT_TRUE((*store)->ForgetWorkerKey("node-a").ok());
  }
  auto store = JobStore::Open({path});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->LoadWorkerKeys(), (std::map<std::string, std::string>{{"node-b", std::string(64, 'b')}}));
}

TEST(JobStoreTest, GarbageFileIsAClearError) {
  const std::string path = DbPath("garbage.db");
  std::ofstream(path) << std::string(4096, 'x');
  auto store = JobStore::Open({path});
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), ::testing::HasSubstr(path));
}

TEST(JobStoreTest, OneStorePerDatabaseAcrossProcessesAndAKilledOwnerReleasesIt) {
  const std::string path = DbPath("locked.db");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = JobStore::Open({path});
    const char c = store.ok() ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(3);
    pause();  // Holds the store until killed.
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  auto second = JobStore::Open({path});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr("in use by another coordinator (pid " +
                                                              std::to_string(child) + ","));
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr(path + ".lock"));
  // SIGKILL: no chance to clean up; the kernel drops the lock with the process.
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  auto third = JobStore::Open({path});
  ASSERT_TRUE(third.ok()) << third.status();
  // And within one process too: a second store on the same file is refused until the first closes.
  EXPECT_FALSE(JobStore::Open({path}).ok());
  third->reset();
  EXPECT_TRUE(JobStore::Open({path}).ok());
}

// Runs one statement on the database directly (as damage from outside would).
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

int64_t RawCount(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_stmt* st = nullptr;
  int64_t n = -1;
  if (sqlite3_open(path.c_str(), &db) == SQLITE_OK && sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

TEST(JobStoreTest, DamagedRowsAreQuarantinedAndTheRestLoads) {
  const std::string path = DbPath("damaged.db");
  {
    auto store = JobStore::Open({path});
    ASSERT_TRUE(store.ok());
    for (const char* id : {"job-000001", "job-000002", "job-000003"}) {
      v1::Job job;
      job.set_id(id);
      job.set_state(v1::JOB_STATE_PENDING);
      ASSERT_TRUE((*store)->Put(job).ok());
    }
  }
  // Row 1: bytes that are not a Job message; row 3: a valid message under another row's id.
  RawExec(path, "UPDATE jobs SET job = x'ffffffff0a' WHERE id = 'job-000001'");
  v1::Job other;
  other.set_id("job-000002");
  std::string hex;
  for (unsigned char ch : other.SerializeAsString()) hex += absl::StrFormat("%02x", ch);
  RawExec(path, "UPDATE jobs SET job = x'" + hex + "' WHERE id = 'job-000003'");
  {
    auto store = JobStore::Open({path});
    ASSERT_TRUE(store.ok());
    std::vector<std::string> quarantined;
    auto jobs = (*store)->LoadAll(&quarantined);
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ(jobs->size(), 1u);
    EXPECT_EQ(jobs->at(0).id(), "job-000002");
    ASSERT_EQ(quarantined.size(), 2u);
    EXPECT_THAT(quarantined[0], ::testing::HasSubstr("job job-000001: the stored job (5 bytes) is not a valid Job"));
    EXPECT_THAT(quarantined[1], ::testing::HasSubstr("job job-000003: the stored job names itself 'job-000002'"));
  }
  EXPECT_EQ(RawCount(path, "SELECT COUNT(*) FROM quarantine"), 2);
  EXPECT_EQ(RawCount(path, "SELECT COUNT(*) FROM jobs"), 1);
  // The next start finds nothing more to quarantine.
  auto store = JobStore::Open({path});
  ASSERT_TRUE(store.ok());
  std::vector<std::string> quarantined;
  auto jobs = (*store)->LoadAll(&quarantined);
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->size(), 1u);
  EXPECT_TRUE(quarantined.empty());
}

// Defect 10: a job id is handed out only once the counter past it is durable. On a full file system
// (a 1 MB tmpfs filled up) the counter's commit fails: NextJobId must then fail, not return an id whose
// increment was rolled back — the next call would hand out the same id again, and a second job's
// INSERT OR REPLACE would overwrite the first. Every id it returned is distinct, and a reopened store
// (space freed) continues past all of them.
TEST(JobStoreTest, AJobIdIsHandedOutOnlyOnceItsCounterIsDurable) {
  std::string why_not;
  auto fs = SmallTmpfs::Mount("ids_fs", &why_not);
  if (fs == nullptr) GTEST_SKIP() << why_not;
  const std::string path = fs->dir() + "/ids.db";
  std::set<std::string> handed_out;
  int refused = 0;
  {
    auto store = JobStore::Open({path});
    ASSERT_TRUE(store.ok()) << store.status();
    fs->Fill();
    for (int i = 0; i < 2000; ++i) {
      auto id = (*store)->NextJobId();
      if (!id.ok()) {
        ++refused;
        EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
        continue;
      }
      EXPECT_TRUE(handed_out.insert(*id).second) << *id << " was handed out twice (after " << refused
                                                 << " refusals)";
    }
  }
  EXPECT_GT(refused, 0) << "every increment was stored on a full file system: the test proves nothing";
  fs->Free();
  auto store = JobStore::Open({path});
  ASSERT_TRUE(store.ok()) << store.status();
  auto next = (*store)->NextJobId();
  ASSERT_TRUE(next.ok()) << next.status();
  for (const std::string& id : handed_out) EXPECT_LT(id, *next) << "handed out again after a restart";
}

}  // namespace
}  // namespace tessera::coordinator
