// JobQueue's policy alone: higher priorities first; within one, first come first served with requeued
// jobs in front; backfill until a job of the pool has waited past the limit (then later jobs of that
// pool only are behind it), and no reservation from a job that can never fit or is held back by its
// own earlier attempt.
#include "coordinator/job_queue.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "spec/priority.h"

namespace tessera::coordinator {
namespace {

using Outcome = JobQueue::Outcome;

const PoolKey kCpu{v1::DEVICE_KIND_CPU, "default"};
const PoolKey kCpuA{v1::DEVICE_KIND_CPU, "a"};
const PoolKey kCuda{v1::DEVICE_KIND_CUDA, "default"};
const absl::Time kT0 = absl::FromUnixSeconds(1000000);
constexpr int kLow = spec::kPriorityLow, kNormal = spec::kPriorityNormal, kHigh = spec::kPriorityHigh;

// Runs one pass, answering each job as `answers` says (kWaits for a job not named; a job offered behind
// a reservation is not placed, as the coordinator must not place it); returns what was offered, in
// order, with "!" for those offered behind a reservation.
std::vector<std::string> Pass(JobQueue& q, absl::Time now, const std::map<std::string, Outcome>& answers) {
  std::vector<std::string> offered;
  q.Pass(now, [&](const std::string& id, bool behind) {
    offered.push_back(behind ? id + "!" : id);
    auto it = answers.find(id);
    const Outcome o = it == answers.end() ? Outcome::kWaits : it->second;
    return behind && o == Outcome::kPlaced ? Outcome::kWaits : o;
  });
  return offered;
}

TEST(JobQueueTest, FirstComeFirstServedAndARequeuedJobFirst) {
  JobQueue q(JobQueueOptions{});
  q.Push("a", kCpu, kT0, JobQueue::Where::kBack, kNormal);
  q.Push("b", kCpu, kT0, JobQueue::Where::kBack, kNormal);
  q.Push("c", kCpu, kT0, JobQueue::Where::kFront, kNormal);
  EXPECT_EQ(q.ids(), (std::deque<std::string>{"c", "a", "b"}));
  EXPECT_EQ(Pass(q, kT0, {}), (std::vector<std::string>{"c", "a", "b"}));
  EXPECT_EQ(q.size(), 3u) << "jobs that wait stay";
  EXPECT_EQ(Pass(q, kT0, {{"a", Outcome::kPlaced}}), (std::vector<std::string>{"c", "a", "b"}));
  EXPECT_EQ(q.ids(), (std::deque<std::string>{"c", "b"}));
  EXPECT_FALSE(q.Contains("a"));
  EXPECT_EQ(q.QueuedAt("a"), absl::InfinitePast());
  q.Remove("c");
  q.Remove("nope");
  EXPECT_EQ(q.ids(), (std::deque<std::string>{"b"}));
  q.Push("b", kCpu, kT0 + absl::Seconds(5), JobQueue::Where::kFront, kNormal);
  EXPECT_EQ(q.size(), 1u) << "pushed again: moved, not added";
  EXPECT_EQ(q.QueuedAt("b"), kT0 + absl::Seconds(5));
}

TEST(JobQueueTest, HigherPrioritiesFirstAndRequeuedJobsInFrontOfTheirOwn) {
  JobQueue q({});
  q.Push("low1", kCpu, kT0, JobQueue::Where::kBack, kLow);
  q.Push("normal1", kCpu, kT0, JobQueue::Where::kBack, kNormal);
  q.Push("high1", kCpu, kT0, JobQueue::Where::kBack, kHigh);
  q.Push("normal2", kCpu, kT0, JobQueue::Where::kBack, kNormal);
  q.Push("high2", kCpu, kT0, JobQueue::Where::kBack, kHigh);
  q.Push("250", kCpu, kT0, JobQueue::Where::kBack, 250);
  q.Push("low_requeued", kCpu, kT0, JobQueue::Where::kFront, kLow);
  q.Push("normal_requeued", kCpu, kT0, JobQueue::Where::kFront, kNormal);
  EXPECT_EQ(Pass(q, kT0, {}), (std::vector<std::string>{"high1", "high2", "250", "normal_requeued", "normal1", "normal2",
                                                        "low_requeued", "low1"}));
  // A job pushed again takes its new priority.
  q.Push("low1", kCpu, kT0, JobQueue::Where::kBack, kHigh);
  EXPECT_EQ(q.ids().at(2), "low1");
  EXPECT_EQ(q.size(), 8u);
  // Backfill across priorities: a waiting high-priority job does not keep lower ones off free devices
  // before the limit, and holds its pool once past it.
  JobQueue b({});
  b.Push("big_high", kCpu, kT0, JobQueue::Where::kBack, kHigh);
  b.Push("small_low", kCpu, kT0, JobQueue::Where::kBack, kLow);
  EXPECT_EQ(Pass(b, kT0 + absl::Minutes(11), {}), (std::vector<std::string>{"big_high", "small_low!"}));
}

TEST(JobQueueTest, ALaterJobBackfillsUntilTheEarlierOneHasWaitedPastTheLimit) {
  JobQueue q(JobQueueOptions{absl::Minutes(10)});
  q.Push("big", kCpu, kT0, JobQueue::Where::kBack, kNormal);
  q.Push("small", kCpu, kT0, JobQueue::Where::kBack, kNormal);
  // Within the limit: the small job is placed although the big one waits.
  EXPECT_EQ(Pass(q, kT0 + absl::Minutes(10), {{"small", Outcome::kPlaced}}),
            (std::vector<std::string>{"big", "small"}));
  EXPECT_FALSE(q.Contains("small"));
  // Past the limit: a small job behind it in the same pool is offered behind the reservation, and
  // waits; one in another pool or of another kind is not held back.
  q.Push("small2", kCpu, kT0 + absl::Minutes(11), JobQueue::Where::kBack, kNormal);
  q.Push("other_pool", kCpuA, kT0 + absl::Minutes(11), JobQueue::Where::kBack, kNormal);
  q.Push("gpu", kCuda, kT0 + absl::Minutes(11), JobQueue::Where::kBack, kNormal);
  const std::map<std::string, Outcome> fit = {
      {"small2", Outcome::kPlaced}, {"other_pool", Outcome::kPlaced}, {"gpu", Outcome::kPlaced}};
  EXPECT_EQ(Pass(q, kT0 + absl::Minutes(10) + absl::Seconds(1), fit),
            (std::vector<std::string>{"big", "small2!", "other_pool", "gpu"}));
  EXPECT_EQ(q.ids(), (std::deque<std::string>{"big", "small2"}));
  // Once the big job is placed, nothing is reserved.
  EXPECT_EQ(Pass(q, kT0 + absl::Hours(1), {{"big", Outcome::kPlaced}, {"small2", Outcome::kPlaced}}),
            (std::vector<std::string>{"big", "small2"}));
  EXPECT_TRUE(q.empty());
}

TEST(JobQueueTest, AJobThatNeverFitsOrIsHeldReservesNothing) {
  for (Outcome first : {Outcome::kNeverFits, Outcome::kHeld}) {
    JobQueue q(JobQueueOptions{absl::Minutes(10)});
    q.Push("first", kCpu, kT0, JobQueue::Where::kBack, kNormal);
    q.Push("later", kCpu, kT0, JobQueue::Where::kBack, kNormal);
    EXPECT_EQ(Pass(q, kT0 + absl::Hours(5), {{"first", first}, {"later", Outcome::kPlaced}}),
              (std::vector<std::string>{"first", "later"}))
        << static_cast<int>(first);
    EXPECT_EQ(q.ids(), (std::deque<std::string>{"first"}));
  }
}

TEST(JobQueueTest, TheWaitCountsFromThePush) {
  JobQueue q(JobQueueOptions{absl::Minutes(10)});
  q.Push("big", kCpu, kT0, JobQueue::Where::kBack, kNormal);
  q.Push("small", kCpu, kT0, JobQueue::Where::kBack, kNormal);
  // Requeued after a failed attempt, 30 minutes on: it has waited only since.
  q.Push("big", kCpu, kT0 + absl::Minutes(30), JobQueue::Where::kFront, kNormal);
  EXPECT_EQ(Pass(q, kT0 + absl::Minutes(35), {{"small", Outcome::kPlaced}}),
            (std::vector<std::string>{"big", "small"}));
  EXPECT_TRUE(q.Contains("big"));
  EXPECT_FALSE(q.Contains("small"));
}

}  // namespace
}  // namespace tessera::coordinator
