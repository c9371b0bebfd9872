// WorkerOrders alone: numbering, write-ahead holds that nothing overtakes, pulled and pushed streams,
// acknowledgements, and the orders a newer stream, a lost worker or a new session gets.
#include "coordinator/worker_orders.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

v1::Assignment Order(const std::string& job) {
  v1::Assignment a;
  a.set_action(v1::Assignment::ACTION_START);
  a.set_job_id(job);
  return a;
}

// Records what it is given, as "job#seq", and how it ended.
class RecordingSink : public AssignmentSink {
 public:
  void Deliver(std::shared_ptr<const v1::Assignment> a) override {
    EXPECT_FALSE(ended) << "delivered after End";
    got.push_back(a->job_id() + "#" + std::to_string(a->seq()));
  }
  void End(const absl::Status& status) override {
    EXPECT_FALSE(ended) << "ended twice";
    ended = true;
    end_status = status;
  }
  std::vector<std::string> got;
  bool ended = false;
  absl::Status end_status;
};

// Pulls every order that may leave with `durable`, as "job#seq".
std::vector<std::string> TakeAll(WorkerOrders& o, uint64_t durable) {
  std::vector<std::string> got;
  while (auto a = o.Take(durable)) got.push_back(a->job_id() + "#" + std::to_string(a->seq()));
  return got;
}

using Strings = std::vector<std::string>;

TEST(WorkerOrdersTest, OrdersAreNumberedAndHeldOnesAreOvertakenByNone) {
  WorkerOrders o;
  EXPECT_EQ(o.Send(Order("a"), /*after=*/0, /*durable=*/3), 1);
  EXPECT_EQ(o.Send(Order("b"), /*after=*/5, /*durable=*/3), 2);  // Waits for ticket 5.
  EXPECT_EQ(o.Send(Order("c"), /*after=*/0, /*durable=*/3), 3);  // Behind b.
  EXPECT_TRUE(o.HeldBeyond(3));
  EXPECT_EQ(TakeAll(o, 3), Strings({"a#1"}));
  EXPECT_EQ(TakeAll(o, 4), Strings());
  EXPECT_EQ(TakeAll(o, 5), Strings({"b#2", "c#3"}));
  EXPECT_FALSE(o.HeldBeyond(5));
  EXPECT_EQ(o.last_seq(), 3);
  EXPECT_EQ(o.unacknowledged(), 3u);
  EXPECT_EQ(o.waiting(), 0u);
}

TEST(WorkerOrdersTest, APushedStreamGetsWhatMayLeaveAtOnceAndHeldOnesWhenFlushed) {
  WorkerOrders o;
  o.Send(Order("a"), 0, 0);
  o.Send(Order("b"), /*after=*/2, /*durable=*/0);
  o.Open(/*stream=*/1, absl::OkStatus());
  RecordingSink sink;
  o.Attach(&sink, /*durable=*/0);
  EXPECT_TRUE(o.pushed());
  EXPECT_EQ(sink.got, Strings({"a#1"}));
  o.Send(Order("c"), 0, /*durable=*/1);  // Behind the held b.
  EXPECT_EQ(sink.got, Strings({"a#1"}));
  o.Flush(/*durable=*/2);
  EXPECT_EQ(sink.got, Strings({"a#1", "b#2", "c#3"}));
  o.Send(Order("d"), 0, 2);
  EXPECT_EQ(sink.got, Strings({"a#1", "b#2", "c#3", "d#4"}));
  EXPECT_EQ(o.waiting(), 0u) << "every order went to the pushed stream";
  EXPECT_EQ(o.unacknowledged(), 4u);
  EXPECT_FALSE(sink.ended);
}

TEST(WorkerOrdersTest, AcknowledgedOrdersAreForgottenAndTheRestGoFirstToANewerStream) {
  WorkerOrders o;
  for (const char* job : {"a", "b", "c"}) o.Send(Order(job), 0, 0);
  o.Open(1, absl::OkStatus());
  RecordingSink first;
  o.Attach(&first, 0);
  EXPECT_EQ(first.got, Strings({"a#1", "b#2", "c#3"}));
  o.Send(Order("d"), /*after=*/9, /*durable=*/0);  // Held: not given yet.
  ASSERT_TRUE(o.Acknowledge(1).ok());
  EXPECT_EQ(o.unacknowledged(), 2u);
  // A reconnect: the first stream ends, b and c (given, not acknowledged) go first again, then d.
  o.Open(2, absl::FailedPreconditionError("replaced"));
  EXPECT_TRUE(first.ended);
  EXPECT_EQ(first.end_status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(o.pushed());
  EXPECT_EQ(TakeAll(o, 0), Strings({"b#2", "c#3"}));
  EXPECT_EQ(TakeAll(o, 9), Strings({"d#4"}));
  // An acknowledgement never goes back.
  ASSERT_TRUE(o.Acknowledge(3).ok());
  ASSERT_TRUE(o.Acknowledge(2).ok());
  EXPECT_EQ(o.applied_seq(), 3);
  EXPECT_EQ(o.unacknowledged(), 1u);
  o.Open(3, absl::OkStatus());
  EXPECT_EQ(TakeAll(o, 9), Strings({"d#4"}));
}

TEST(WorkerOrdersTest, AnAcknowledgementOutsideTheSessionIsRefusedAndChangesNothing) {
  WorkerOrders o;
  o.Send(Order("a"), 0, 0);
  o.Send(Order("b"), 0, 0);
  EXPECT_EQ(TakeAll(o, 0), Strings({"a#1", "b#2"}));
  for (int64_t bad : {int64_t{-1}, int64_t{3}, int64_t{1} << 40}) {
    const absl::Status s = o.Acknowledge(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("applied_seq"), std::string::npos) << s;
  }
  EXPECT_EQ(o.applied_seq(), 0);
  EXPECT_EQ(o.unacknowledged(), 2u);
  EXPECT_TRUE(o.Acknowledge(2).ok());
  EXPECT_EQ(o.unacknowledged(), 0u);
}

TEST(WorkerOrdersTest, OnlyTheNewestStreamDetachesItsSinkAndADetachedSinkIsNotEnded) {
  WorkerOrders o;
  o.Open(1, absl::OkStatus());
  RecordingSink sink;
  o.Attach(&sink, 0);
  o.Detach(/*stream=*/7);  // Not the newest: nothing happens.
  EXPECT_TRUE(o.pushed());
  o.Detach(1);
  EXPECT_FALSE(o.pushed());
  o.Send(Order("a"), 0, 0);
  o.EndSink(absl::CancelledError("x"));
  EXPECT_TRUE(sink.got.empty());
  EXPECT_FALSE(sink.ended);
  EXPECT_EQ(TakeAll(o, 0), Strings({"a#1"}));
}

TEST(WorkerOrdersTest, ALostWorkerLosesItsOrdersAndANewSessionNumbersFromOne) {
  WorkerOrders o;
  o.Send(Order("a"), 0, 0);
  o.Send(Order("b"), 0, 0);
  o.Open(1, absl::OkStatus());
  RecordingSink sink;
  o.Attach(&sink, 0);
  o.Send(Order("c"), /*after=*/4, /*durable=*/0);
  o.Drop(absl::NotFoundError("lost"));
  EXPECT_TRUE(sink.ended);
  EXPECT_EQ(sink.end_status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(o.waiting() + o.unacknowledged(), 0u);
  EXPECT_EQ(o.Send(Order("d"), 0, 4), 4) << "numbering goes on until a new session";
  o.NewSession(absl::OkStatus());
  EXPECT_EQ(o.last_seq(), 0);
  EXPECT_EQ(o.applied_seq(), 0);
  EXPECT_EQ(o.waiting(), 0u);
  EXPECT_EQ(o.Send(Order("e"), 0, 4), 1);
  EXPECT_EQ(TakeAll(o, 4), Strings({"e#1"}));
}

}  // namespace
}  // namespace tessera::coordinator
