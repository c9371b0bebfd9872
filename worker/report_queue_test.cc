#include "worker/report_queue.h"

#include "gtest/gtest.h"

namespace tessera::worker {
namespace {

v1::ReportRankStatusRequest Report(v1::ReportRankStatusRequest::Event event, int rank) {
  v1::ReportRankStatusRequest r;
  r.set_job_id("job-000001");
  r.set_event(event);
  r.set_rank(rank);
  return r;
}

constexpr auto kExited = v1::ReportRankStatusRequest::EVENT_EXITED;
constexpr auto kProgress = v1::ReportRankStatusRequest::EVENT_PROGRESS;
constexpr auto kStarted = v1::ReportRankStatusRequest::EVENT_STARTED;

TEST(ReportQueueTest, TransientFailuresKeepTheReportAndTheOrder) {
  ReportQueue q;
  q.Push(Report(kStarted, 0));
  q.Push(Report(kExited, 0));
  std::vector<int> sent;
  int calls = 0;
  // The coordinator is slow: the exit's first send times out (it was dropped here before).
  q.Deliver([&](v1::ReportRankStatusRequest& r) {
    if (++calls == 2) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow");
    sent.push_back(r.event());
    return grpc::Status::OK;
  });
  EXPECT_EQ(sent, std::vector<int>{kStarted});
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q.Exits().size(), 1u) << "the exit is still there, for the next round or a registration";
  q.Deliver([&](v1::ReportRankStatusRequest& r) {
    sent.push_back(r.event());
    return grpc::Status::OK;
  });
  EXPECT_EQ(sent, (std::vector<int>{kStarted, kExited}));
  EXPECT_EQ(q.size(), 0u);
}

TEST(ReportQueueTest, RefusalsForGoodAreDropped) {
  ReportQueue q;
  q.Push(Report(kExited, 0));
  q.Push(Report(kExited, 1));
  int calls = 0;
  q.Deliver([&](v1::ReportRankStatusRequest&) {
    ++calls;
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "job does not exist");
  });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_TRUE(IsTransient(grpc::Status(grpc::StatusCode::UNAVAILABLE, "")));
  EXPECT_FALSE(IsTransient(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "")));
}

TEST(ReportQueueTest, AFullQueueDropsOldProgressNeverStartsOrExits) {
  ReportQueue q(/*max_progress=*/3);
  q.Push(Report(kStarted, 0));
  for (int i = 0; i < 10; ++i) q.Push(Report(kProgress, i));
  q.Push(Report(kExited, 0));
  for (int i = 10; i < 12; ++i) q.Push(Report(kProgress, i));
  std::vector<std::pair<int, int>> left;
  q.Deliver([&](v1::ReportRankStatusRequest& r) {
    left.push_back({r.event(), r.rank()});
    return grpc::Status::OK;
  });
  // The start, the newest three progress reports around the exit, and the exit, in order.
  EXPECT_EQ(left, (std::vector<std::pair<int, int>>{{kStarted, 0}, {kProgress, 9}, {kExited, 0}, {kProgress, 10},
                                                    {kProgress, 11}}));
}

}  // namespace
}  // namespace tessera::worker
