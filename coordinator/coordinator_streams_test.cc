// Assignment streams (coordinator_workers.cc) without gRPC: orders pushed into a stream's sink as they
// come, streams replaced or ended, orders not acknowledged given again on the worker's next stream.
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
  ASSERT_EQ(one.orders.size(), 1u);  // Pushed when placed, with no poll.
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

}  // namespace
}  // namespace tessera::coordinator
