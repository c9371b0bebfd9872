// Priorities in the coordinator: a spec's scheduling.priority orders the queue (a later high-priority
// job is placed before earlier normal ones when devices free), and a scheduling policy (--policy) caps
// who may ask for what, refusing the submission with the cap's name.
#include <string>

#include "coordinator/coordinator_test_fixture.h"
#include "coordinator/scheduling_policy.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

v1::JobSpec WithPriority(v1::JobSpec spec, const std::string& priority) {
  spec.mutable_scheduling()->set_priority(priority);
  return spec;
}

TEST_F(CoordinatorTest, AHigherPriorityJobIsPlacedBeforeEarlierOnes) {
  const std::string a = AddWorker("a", 1);
  auto running = c_->Submit(Spec(1, 1), 0);
  auto normal = c_->Submit(Spec(1, 1), 0);
  auto low = c_->Submit(WithPriority(Spec(1, 1), "low"), 0);
  auto high = c_->Submit(WithPriority(Spec(1, 1), "high"), 0);
  ASSERT_TRUE(running.ok() && normal.ok() && low.ok() && high.ok());
  EXPECT_EQ(State(running->id()), v1::JOB_STATE_SCHEDULED);
  auto placed = Drain(a);
  ASSERT_TRUE(c_->Cancel(running->id()).ok());
  Drain(a);
  for (auto& x : placed) Report(a, x, v1::ReportRankStatusRequest::EVENT_EXITED, -15);
  EXPECT_EQ(State(high->id()), v1::JOB_STATE_SCHEDULED) << "the high-priority job, submitted last, goes first";
  EXPECT_EQ(State(normal->id()), v1::JOB_STATE_PENDING);
  EXPECT_EQ(State(low->id()), v1::JOB_STATE_PENDING);
  placed = Drain(a);
  ASSERT_TRUE(c_->Cancel(high->id()).ok());
  Drain(a);
  for (auto& x : placed) Report(a, x, v1::ReportRankStatusRequest::EVENT_EXITED, -15);
  EXPECT_EQ(State(normal->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(State(low->id()), v1::JOB_STATE_PENDING);
}

TEST_F(CoordinatorTest, APolicyCapsEachTeamsPriority) {
  auto policy = ParseSchedulingPolicy(
      "teams:\n  - {name: vision, members: [alice], max_priority: high}\n  - {name: speech, members: [bob]}\n", "p.yaml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  policy_ = *policy;
  Restart();
  EXPECT_TRUE(c_->Submit(WithPriority(Spec(1, 1), "high"), 0, "alice").ok());
  EXPECT_TRUE(c_->Submit(Spec(1, 1), 0, "bob").ok());  // normal: bob's cap.
  auto above = c_->Submit(WithPriority(Spec(1, 1), "high"), 0, "bob");
  ASSERT_FALSE(above.ok());
  EXPECT_EQ(above.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(above.status().message(), "scheduling.priority high is above team 'speech''s max_priority normal");
  auto outsider = c_->Submit(Spec(1, 1), 0, "mallory");
  ASSERT_FALSE(outsider.ok());
  EXPECT_EQ(outsider.status().message(), "user 'mallory' is in no team of the scheduling policy");
}

}  // namespace
}  // namespace tessera::coordinator
