// Assignment streams (coordinator_workers.cc) without gRPC: orders pushed into a stream's sink as they
// come, streams replaced or ended, orders not acknowledged given again on the worker's next stream,
// START orders held until their attempt is durable.
#include <sqlite3.h>

#include <optional>

#include "coordinator/coordinator_test_fixture.h"
#include "gmock/gmock.h"

namespace tessera::coordinator {
namespace {

using ::testing::HasSubstr;

struct RecordingSink : public AssignmentSink {
  void Deliver(std::shared_ptr<const v1::Assignment> a) override { orders.push_back(*a); }
  void End(const absl::Status& status) override { ended = status; }
  std::vector<v1::Assignment> orders;
  std::optional<absl::Status> ended;
};

TEST_F(CoordinatorTest, APushedStreamGetsOrdersAsTheyComeAndEndsWhenReplacedOrLost) {
  auto reg = c_->RegisterWorker(Registration("a", 1));
  ASSERT_TRUE(reg.ok());
  const int64_t session = reg->session();
  RecordingSink one;
  auto stale = c_->AttachAssignmentSink("a", session + 1, &one);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c_->AttachAssignmentSink("nobody", 0, &one).status().code(), absl::StatusCode::kNotFound);
  auto first = c_->AttachAssignmentSink("a", session, &one);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(c_->Submit(Spec(1, 1), 0).ok());
  // Pushed with no poll once the attempt's row is durable (write-ahead: coordinator/store_writer.h).
  ASSERT_TRUE(c_->WaitForStore().ok());
  ASSERT_EQ(one.orders.size(), 1u);
  EXPECT_EQ(one.orders[0].seq(), 1);
  EXPECT_FALSE(one.ended.has_value());
  // A newer stream (the connection broke with the order in flight) ends this one and gets the order
  // again, as it was not acknowledged.
  RecordingSink two;
  auto second = c_->AttachAssignmentSink("a", session, &two);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(one.ended.has_value());
  EXPECT_EQ(one.ended->code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(one.ended->message(), HasSubstr("newer assignment stream"));
  ASSERT_EQ(two.orders.size(), 1u);
  EXPECT_EQ(two.orders[0].seq(), 1);
  // The old stream's late detach changes nothing; the new one's detach stops the pushing.
  c_->DetachAssignmentSink("a", *first);
  v1::HeartbeatRequest hb;
  hb.set_worker_id("a");
  hb.set_session(session);
  hb.set_applied_seq(1);
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  ASSERT_TRUE(c_->Cancel(two.orders[0].job_id()).ok());  // A STOP order: pushed to the live stream.
  ASSERT_EQ(two.orders.size(), 2u);
  EXPECT_EQ(two.orders[1].action(), v1::Assignment::ACTION_STOP);
  // The worker is lost: its stream ends NOT_FOUND (it registers again).
  clock_.Advance(absl::Seconds(11));
  c_->CheckLiveness();
  ASSERT_TRUE(two.ended.has_value());
  EXPECT_EQ(two.ended->code(), absl::StatusCode::kNotFound);
  // A registration of another session ends the stream of the previous one.
  auto again = c_->RegisterWorker(Registration("a", 1));
  ASSERT_TRUE(again.ok());
  RecordingSink three;
  ASSERT_TRUE(c_->AttachAssignmentSink("a", again->session(), &three).ok());
  ASSERT_TRUE(c_->RegisterWorker(Registration("a", 1)).ok());
  ASSERT_TRUE(three.ended.has_value());
  EXPECT_THAT(three.ended->message(), HasSubstr("registered again"));
}

TEST_F(CoordinatorTest, AnOrderNotAcknowledgedIsSentAgainOnTheWorkersNextStream) {
  auto reg = c_->RegisterWorker(Registration("a", 1));
  ASSERT_TRUE(reg.ok());
  const int64_t session = reg->session();
  ASSERT_TRUE(c_->Submit(Spec(1, 1), 0).ok());
  const int64_t one = c_->StreamOpened("a", session);
  ASSERT_TRUE(c_->WaitForStore().ok());  // The START order leaves once its attempt is durable.
  auto given = c_->NextAssignment("a", absl::ZeroDuration(), session, one);
  ASSERT_TRUE(given.ok() && given->has_value());
  EXPECT_EQ((*given)->seq(), 1);
  // The connection broke with the order in flight; the worker opens another stream.
  const int64_t two = c_->StreamOpened("a", session);
  auto old_stream = c_->NextAssignment("a", absl::ZeroDuration(), session, one);
  ASSERT_FALSE(old_stream.ok());
  EXPECT_THAT(old_stream.status().message(), HasSubstr("newer assignment stream"));
  auto again = c_->NextAssignment("a", absl::ZeroDuration(), session, two);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->seq(), 1);
  EXPECT_EQ((*again)->job_id(), (*given)->job_id());
  // Acknowledged: a later stream gets nothing more.
  v1::HeartbeatRequest hb;
  hb.set_worker_id("a");
  hb.set_session(session);
  hb.set_applied_seq(1);
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  const int64_t three = c_->StreamOpened("a", session);
  auto none = c_->NextAssignment("a", absl::ZeroDuration(), session, three);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // An acknowledgement of an order never given is refused, naming the field.
  hb.set_applied_seq(7);
  absl::Status bad = c_->Heartbeat(hb);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("applied_seq: 7"));
}

TEST_F(CoordinatorTest, AJobsSpecGoesWithTheFirstStartOrderOfEachWorkerOnly) {
  AddWorker("a", 2);
  AddWorker("b", 2);
  auto job = c_->Submit(Spec(2, 2), 0);  // dp=2 × tp=2: two ranks on each worker.
  ASSERT_TRUE(job.ok()) << job.status();
  for (const std::string worker : {"a", "b"}) {
    const std::vector<v1::Assignment> orders = Drain(worker);
    ASSERT_EQ(orders.size(), 2u) << worker;
    EXPECT_TRUE(orders[0].has_spec()) << worker;
    EXPECT_EQ(orders[0].spec().output_dir(), job->spec().output_dir());
    EXPECT_FALSE(orders[1].has_spec()) << worker << ": the worker uses the first order's (worker/start_specs.h)";
    EXPECT_EQ(orders[1].attempt(), orders[0].attempt());
  }
}

// The state column of job `id`'s row as another connection reads it now (-1: no row).
int StoredState(const std::string& db, const std::string& id) {
  sqlite3* conn = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &conn, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  int state = -1;
  if (sqlite3_prepare_v2(conn, "SELECT state FROM jobs WHERE id = ?", -1, &st, nullptr) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, id.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW) state = sqlite3_column_int(st, 0);
  }
  sqlite3_finalize(st);
  sqlite3_close(conn);
  return state;
}

// Write-ahead: an attempt's START orders (which carry its number, half of the fencing token) leave
// only once the row that records the attempt is durable — a coordinator that crashed after sending
// them but before storing it would number its next attempt the same. The database's write lock is
// held by another connection, so the SCHEDULED row cannot be committed: the job is placed in memory,
// its order is held; once the lock is gone the row is stored and the order given.
TEST_F(CoordinatorTest, AnAttemptsStartOrdersLeaveOnlyOnceTheAttemptIsDurable) {
  auto job = c_->Submit(Spec(1, 1), 0);  // Stored PENDING: no worker yet.
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(c_->WaitForStore().ok());
  sqlite3* locker = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &locker), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(locker, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(locker);
  AddWorker("a", 1);  // Placed: SCHEDULED in memory; the writer waits for the lock (5 s busy timeout).
  EXPECT_EQ(State(job->id()), v1::JOB_STATE_SCHEDULED);
  const int64_t stream = c_->StreamOpened("a", sessions_["a"]);
  auto held = c_->NextAssignment("a", absl::Milliseconds(200), sessions_["a"], stream);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_FALSE(held->has_value()) << "a START order left before its attempt was stored";
  EXPECT_EQ(StoredState(db_, job->id()), v1::JOB_STATE_PENDING);
  sqlite3_exec(locker, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(locker);
  // A pulling stream is woken by the commit (no poll interval): the order comes within the wait.
  auto given = c_->NextAssignment("a", absl::Seconds(30), sessions_["a"], stream);
  ASSERT_TRUE(given.ok() && given->has_value());
  EXPECT_EQ((*given)->action(), v1::Assignment::ACTION_START);
  EXPECT_EQ((*given)->attempt(), 1);
  EXPECT_EQ(StoredState(db_, job->id()), v1::JOB_STATE_SCHEDULED) << "given only once stored";
}

}  // namespace
}  // namespace tessera::coordinator
