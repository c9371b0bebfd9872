#include "coordinator/store_writer.h"

#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

std::string DbPath(const std::string& name) {
  std::string dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
  std::filesystem::remove(dir + "/" + name);
  return dir + "/" + name;
}

v1::Job JobOf(const std::string& id, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.set_created_unix_ms(1);
  return job;
}

// Another connection holding the database's write lock (BEGIN EXCLUSIVE), as a second writer would:
// the store's transactions wait for it (and fail after the store's busy timeout).
class WriteLock {
 public:
  explicit WriteLock(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db_, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db_);
  }
  ~WriteLock() { Release(); }
  void Release() {
    if (db_ == nullptr) return;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
    db_ = nullptr;
  }

 private:
  sqlite3* db_ = nullptr;
};

std::map<std::string, v1::JobState> Stored(const std::string& path) {
  auto store = JobStore::Open({path});
  EXPECT_TRUE(store.ok()) << store.status();
  std::map<std::string, v1::JobState> out;
  if (!store.ok()) return out;
  auto jobs = (*store)->LoadAll();
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  for (const v1::Job& j : *jobs) out[j.id()] = j.state();
  return out;
}

// Rows queued while a transaction is in progress go together in the next one, a job's newest row
// only; durable() and Wait follow the tickets, and on_durable is called when they move.
TEST(StoreWriterTest, RowsQueuedMeanwhileAreCommittedTogetherNewestFirst) {
  const std::string path = DbPath("group.db");
  {
    auto store = JobStore::Open({path});
    ASSERT_TRUE(store.ok()) << store.status();
    std::atomic<int> called{0};
    StoreWriterOptions o;
    o.store = store->get();
    o.on_durable = [&] { ++called; };
    StoreWriter writer(o);
    WriteLock lock(path);  // The first batch waits for it (the busy timeout is 5 s).
    const uint64_t first = writer.Put(JobOf("job-000000", v1::JOB_STATE_PENDING));
    uint64_t last = 0;
    for (int i = 1; i <= 100; ++i) last = writer.Put(JobOf(absl::StrCat("job-", 100000 + i), v1::JOB_STATE_PENDING));
    for (v1::JobState s : {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING}) last = writer.Put(JobOf("job-100007", s));
    EXPECT_GT(last, first);
    EXPECT_LT(writer.durable(), first) << "nothing is durable while another connection holds the write lock";
    lock.Release();
    ASSERT_TRUE(writer.Wait(last, absl::Seconds(30)).ok());
    EXPECT_GE(writer.durable(), last);
    // The first row went alone (or with some of the others); everything after it in one more batch.
    EXPECT_LE(writer.commits(), 2);
    EXPECT_EQ(writer.failures(), 0);
    // job-100007's PENDING row may go with the first batch (if the writer took it after a few Puts);
    // its SCHEDULED and RUNNING rows, queued while the first batch waited, are one row.
    EXPECT_LE((*store)->writes(), 1 + 100 + 1) << "job-100007's last two rows are one";
    EXPECT_GE(called.load(), 1) << "Wait returns after on_durable";
  }
  const auto stored = Stored(path);
  EXPECT_EQ(stored.size(), 101u);
  EXPECT_EQ(stored.at("job-100007"), v1::JOB_STATE_RUNNING) << "the newest row of a job wins";
}

// A batch that cannot be stored (the database locked beyond the busy timeout) fails the waits for its
// tickets with the store's error, and is tried again until it is stored; on_durable comes only then.
TEST(StoreWriterTest, AFailedBatchFailsItsWaitersAndIsTriedAgain) {
  const std::string path = DbPath("retry.db");
  auto store = JobStore::Open({path, absl::Milliseconds(100)});
  ASSERT_TRUE(store.ok()) << store.status();
  std::atomic<int> called{0};
  StoreWriterOptions o;
  o.store = store->get();
  o.on_durable = [&] { ++called; };
  o.retry_after = absl::Milliseconds(50);
  StoreWriter writer(o);
  WriteLock lock(path);
  const uint64_t t = writer.Put(JobOf("job-000001", v1::JOB_STATE_SCHEDULED));
  const absl::Status failed = writer.Wait(t, absl::Seconds(30));
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_THAT(failed.message(), ::testing::HasSubstr("job-000001"));
  EXPECT_LT(writer.durable(), t);
  EXPECT_EQ(called.load(), 0) << "nothing became durable";
  lock.Release();
  absl::Status s = failed;
  for (int i = 0; i < 600 && !s.ok(); ++i) {  // Tried every 50 ms; give it 30 s on a loaded machine.
    absl::SleepFor(absl::Milliseconds(50));
    s = writer.Wait(t, absl::Seconds(1));
  }
  ASSERT_TRUE(s.ok()) << "the failed row is tried again: " << s;
  EXPECT_GE(writer.failures(), 1);
  EXPECT_GE(called.load(), 1);
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(jobs->at(0).state(), v1::JOB_STATE_SCHEDULED);
}

// Destroying the writer stores what is queued first.
TEST(StoreWriterTest, StopsOnlyAfterStoringWhatIsQueued) {
  const std::string path = DbPath("stop.db");
  {
    auto store = JobStore::Open({path});
    ASSERT_TRUE(store.ok()) << store.status();
    StoreWriterOptions o;
    o.store = store->get();
    StoreWriter writer(o);
    for (int i = 0; i < 20; ++i) writer.Put(JobOf(absl::StrCat("job-", 200000 + i), v1::JOB_STATE_PENDING));
  }
  EXPECT_EQ(Stored(path).size(), 20u);
}

}  // namespace
}  // namespace tessera::coordinator
