// Agent with a fake coordinator link, fake ranks and a FakeClock: registration and its backoff,
// heartbeats and their interval, a lost coordinator, the order of assignments, reports.
#include "worker/agent.h"

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "common/time/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Answers as the test sets it and records every call.
class FakeLink final : public CoordinatorLink {
 public:
  grpc::Status Register(const v1::RegisterWorkerRequest& req, v1::RegisterWorkerResponse* resp) override {
    registrations.push_back(req);
    if (blocks != nullptr) blocks();
    if (!register_status.ok()) return register_status;
    resp->set_worker_id("w-1");
    resp->set_session(++sessions);
    resp->set_heartbeat_interval_ms(heartbeat_ms);
    resp->set_lease_ms(lease_ms);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse*) override {
    heartbeats.push_back(req);
    if (blocks != nullptr) blocks();
    return heartbeat_status;
  }
  grpc::Status Report(const v1::ReportRankStatusRequest& req) override {
    if (!report_status.ok()) return report_status;
    reports.push_back(req);
    return grpc::Status::OK;
  }
  void Reconnect() override {
    ++reconnects;
    open = false;
  }
  void OpenAssignments(const std::string& worker_id, int64_t session) override {
    opened.push_back(session);
    open = true;
    broken = false;
    EXPECT_EQ(worker_id, "w-1");
  }
  std::deque<v1::Assignment> TakeAssignments() override {
    std::deque<v1::Assignment> out;
    if (open) out.swap(incoming);
    return out;
  }
  bool AssignmentsBroken() const override { return broken; }
  absl::Duration LongestCall() const override { return absl::Seconds(3); }

  grpc::Status register_status = grpc::Status::OK, heartbeat_status = grpc::Status::OK,
               report_status = grpc::Status::OK;
  int heartbeat_ms = 500;
  int lease_ms = 0;
  int64_t sessions = 0;
  int reconnects = 0;
  bool open = false, broken = false;
  std::deque<v1::Assignment> incoming;
  std::vector<v1::RegisterWorkerRequest> registrations;
  std::vector<v1::HeartbeatRequest> heartbeats;
  std::vector<v1::ReportRankStatusRequest> reports;
  std::vector<int64_t> opened;
  std::function<void()> blocks;  // Run inside Register and Heartbeat: a call that takes its time.
};

// Ranks that start when told and exit when the test says so.
class FakeRanks final : public Ranks {
 public:
  absl::Status Start(const v1::Assignment& a) override {
    if (!start_status.ok()) return start_status;
    started.push_back(a.rank());
    started_outputs.push_back(a.spec().output_dir());
    v1::RunningRank r;
    r.set_job_id(a.job_id());
    r.set_attempt(a.attempt());
    r.set_rank(a.rank());
    running.push_back(r);
    events.push_back({v1::ReportRankStatusRequest::EVENT_STARTED, a.job_id(), a.attempt(), a.rank()});
    return absl::OkStatus();
  }
  void StopJob(const std::string& job_id, int attempt, const std::string& reason) override {
    stopped.push_back(job_id);
    stopped_attempts.push_back(attempt);
    stop_reasons.push_back(reason);
  }
  std::vector<RankEvent> Poll() override {
    std::vector<RankEvent> out;
    out.swap(events);
    return out;
  }
  std::vector<v1::RunningRank> Running() const override { return running; }
  std::vector<RankProcess> Processes() const override { return {}; }
  // Rank `rank` exits with `code` (reported by the next Poll()).
  void Exit(int rank, int code) {
    for (auto it = running.begin(); it != running.end(); ++it) {
      if (it->rank() != rank) continue;
      RankEvent e{v1::ReportRankStatusRequest::EVENT_EXITED, it->job_id(), it->attempt(), rank};
      e.exit_code = code;
      events.push_back(e);
      running.erase(it);
      return;
    }
  }

  absl::Status start_status;
  std::vector<int> started;
  std::vector<std::string> started_outputs;  // The spec each rank started with (its output_dir).
  std::vector<std::string> stopped;
  std::vector<int> stopped_attempts;
  std::vector<std::string> stop_reasons;
  std::vector<v1::RunningRank> running;
  std::vector<RankEvent> events;
};

class AgentTest : public ::testing::Test {
 protected:
  AgentTest() {
    AgentOptions o;
    o.name = "node-a";
    o.device_count = 2;
    o.clock = &clock_;
    auto link = std::make_unique<FakeLink>();
    auto ranks = std::make_unique<FakeRanks>();
    link_ = link.get();
    ranks_ = ranks.get();
    agent_ = std::make_unique<Agent>(o, nullptr, std::move(link), std::move(ranks));
  }
  // A start order for `rank` of a dp=2 job (valid, so CheckStartOrder lets it through).
  static v1::Assignment Start(int64_t seq, int rank) {
    v1::Assignment a;
    a.set_seq(seq);
    a.set_action(v1::Assignment::ACTION_START);
    a.set_job_id("job-000001");
    a.set_attempt(1);
    a.set_rank(rank);
    a.set_world_size(2);
    a.set_local_rank(rank);
    a.set_store_host("127.0.0.1");
    a.set_store_port(29500);
    auto spec = spec::ParseJobSpec("name: t\ndata: {path: /x.bin}\nmodel: {heads: 4}\noutput_dir: /tmp/t\n"
                                   "parallel: {dp: 2}\ntrain: {micro_batch: 1, global_batch: 2}\n",
                                   {});
    EXPECT_TRUE(spec.ok()) << spec.status();
    *a.mutable_spec() = *spec;
    return a;
  }

  FakeClock clock_;
  FakeLink* link_;
  FakeRanks* ranks_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(AgentTest, RegistersThenHeartbeatsAtTheCoordinatorsInterval) {
  agent_->Tick();
  ASSERT_EQ(link_->registrations.size(), 1u);
  EXPECT_EQ(link_->registrations[0].name(), "node-a");
  EXPECT_EQ(link_->registrations[0].attempt(), 1);
  EXPECT_EQ(link_->registrations[0].stop_grace_ms(), 10000) << "the default stop grace, for the coordinator's fence";
  EXPECT_EQ(agent_->worker_id(), "w-1");
  EXPECT_THAT(link_->opened, ElementsAre(1));
  EXPECT_EQ(link_->heartbeats.size(), 1u) << "the first heartbeat goes with the registration's round";
  clock_.Advance(absl::Milliseconds(499));
  agent_->Tick();
  EXPECT_EQ(link_->heartbeats.size(), 1u) << "before the 500 ms interval";
  clock_.Advance(absl::Milliseconds(1));
  agent_->Tick();
  EXPECT_EQ(link_->heartbeats.size(), 2u);
  EXPECT_EQ(link_->registrations.size(), 1u);
}

TEST_F(AgentTest, UnreachableCoordinatorIsRetriedWithDoublingBackoffUpToTwoSeconds) {
  link_->register_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused");
  std::vector<int64_t> retried_after_ms;
  absl::Duration since = absl::ZeroDuration();
  agent_->Tick();
  for (int i = 0; i < 3000 && link_->registrations.size() < 7; ++i) {
    const size_t before = link_->registrations.size();
    clock_.Advance(absl::Milliseconds(10));
    since += absl::Milliseconds(10);
    agent_->Tick();
    if (link_->registrations.size() > before) {
      retried_after_ms.push_back(absl::ToInt64Milliseconds(since));
      since = absl::ZeroDuration();
    }
  }
  EXPECT_THAT(retried_after_ms, ElementsAre(200, 400, 800, 1600, 2000, 2000));
  EXPECT_EQ(link_->reconnects, 7) << "a fresh connection after every failed registration";
  link_->register_status = grpc::Status::OK;
  clock_.Advance(absl::Seconds(2));
  agent_->Tick();
  EXPECT_EQ(agent_->worker_id(), "w-1");
}

TEST_F(AgentTest, LostCoordinatorMeansRegisteringAgainListingRunningRanksAndUndeliveredExits) {
  agent_->Tick();
  link_->incoming = {Start(1, 0), Start(2, 1)};
  agent_->Tick();
  EXPECT_THAT(ranks_->started, ElementsAre(0, 1));
  EXPECT_EQ(agent_->applied_seq(), 2);
  // The coordinator goes away: rank 1 exits meanwhile and its report cannot be delivered.
  link_->heartbeat_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
  link_->report_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
  ranks_->Exit(1, 3);
  clock_.Advance(absl::Milliseconds(500));
  agent_->Tick();
  EXPECT_EQ(agent_->worker_id(), "") << "the failed heartbeat ends the registration";
  EXPECT_EQ(link_->reconnects, 1);
  link_->heartbeat_status = grpc::Status::OK;
  link_->report_status = grpc::Status::OK;
  agent_->Tick();  // The next round registers again, without waiting for a backoff.
  ASSERT_EQ(link_->registrations.size(), 2u);
  EXPECT_EQ(agent_->worker_id(), "w-1");
  EXPECT_THAT(link_->opened, ElementsAre(1, 2));
  const v1::RegisterWorkerRequest& again = link_->registrations.back();
  ASSERT_EQ(again.running_size(), 1);
  EXPECT_EQ(again.running(0).rank(), 0);
  ASSERT_EQ(again.exited_size(), 1) << "the undelivered exit travels with the registration";
  EXPECT_EQ(again.exited(0).rank(), 1);
  EXPECT_EQ(again.exited(0).exit_code(), 3);
  EXPECT_EQ(again.attempt(), 2);
}

TEST_F(AgentTest, OrdersApplyOnceAndInOrderAndAGapReopensTheStream) {
  agent_->Tick();
  link_->incoming = {Start(1, 0), Start(1, 0)};  // Sent again after a reconnect: applied once.
  agent_->Tick();
  EXPECT_THAT(ranks_->started, ElementsAre(0));
  link_->incoming = {Start(3, 1)};  // Order 2 was lost with a broken stream.
  agent_->Tick();
  EXPECT_THAT(ranks_->started, ElementsAre(0));
  EXPECT_EQ(agent_->applied_seq(), 1);
  EXPECT_EQ(link_->opened.size(), 2u) << "a new stream asks for every unacknowledged order";
  v1::Assignment stop;
  stop.set_seq(2);
  stop.set_action(v1::Assignment::ACTION_STOP);
  stop.set_job_id("job-000001");
  link_->incoming = {stop, Start(3, 1)};
  agent_->Tick();
  EXPECT_THAT(ranks_->stopped, ElementsAre("job-000001"));
  EXPECT_THAT(ranks_->stopped_attempts, ElementsAre(0)) << "an order without an attempt stops every attempt";
  EXPECT_THAT(ranks_->started, ElementsAre(0, 1));
  clock_.Advance(absl::Milliseconds(500));
  agent_->Tick();
  EXPECT_EQ(link_->heartbeats.back().applied_seq(), 3) << "the acknowledgement";
}

TEST_F(AgentTest, ARankThatCannotStartIsReportedExitedWithTheReason) {
  agent_->Tick();
  v1::Assignment bad = Start(1, 0);
  bad.set_local_rank(5);  // This worker has 2 devices: refused before the ranks see it.
  link_->incoming = {bad, Start(2, 1)};
  ranks_->start_status = absl::InternalError("disk full");  // The second cannot start.
  agent_->Tick();
  ASSERT_EQ(link_->reports.size(), 2u);
  EXPECT_EQ(link_->reports[0].event(), v1::ReportRankStatusRequest::EVENT_EXITED);
  EXPECT_EQ(link_->reports[0].exit_code(), 127);
  EXPECT_THAT(link_->reports[0].error(), HasSubstr("local_rank"));
  EXPECT_THAT(link_->reports[1].error(), HasSubstr("disk full"));
  EXPECT_EQ(link_->reports[1].worker_id(), "w-1");
}

TEST_F(AgentTest, LaterStartOrdersOfAnAttemptUseTheSpecItsFirstBrought) {
  agent_->Tick();
  v1::Assignment second = Start(2, 1);
  second.clear_spec();  // As the coordinator sends it: the spec once per worker and attempt.
  link_->incoming = {Start(1, 0), second};
  agent_->Tick();
  EXPECT_THAT(ranks_->started, ElementsAre(0, 1));
  EXPECT_THAT(ranks_->started_outputs, ElementsAre("/tmp/t", "/tmp/t"));
  EXPECT_TRUE(link_->reports.size() == 2u && link_->reports[1].event() == v1::ReportRankStatusRequest::EVENT_STARTED);
  // An order of another attempt without a spec (none of that attempt came first) cannot start.
  v1::Assignment other = Start(3, 0);
  other.clear_spec();
  other.set_attempt(2);
  link_->incoming = {other};
  agent_->Tick();
  ASSERT_EQ(link_->reports.size(), 3u);
  EXPECT_EQ(link_->reports[2].exit_code(), 127);
  EXPECT_THAT(link_->reports[2].error(), HasSubstr("assignment.spec: is missing, and no earlier start order of attempt 2"));
  // Nor, after a registration, one whose spec came in the previous session.
  link_->heartbeat_status = grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown");
  clock_.Advance(absl::Seconds(1));
  agent_->Tick();
  link_->heartbeat_status = grpc::Status::OK;
  clock_.Advance(absl::Seconds(1));
  agent_->Tick();
  ASSERT_EQ(link_->registrations.size(), 2u);
  v1::Assignment again = Start(1, 1);
  again.clear_spec();
  link_->incoming = {again};
  agent_->Tick();
  EXPECT_THAT(ranks_->started, ElementsAre(0, 1)) << "nothing more started";
}

TEST_F(AgentTest, ReportsWaitForTheCoordinatorAndKeepTheirOrder) {
  agent_->Tick();
  link_->incoming = {Start(1, 0)};
  link_->report_status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow");
  agent_->Tick();
  ranks_->Exit(0, 0);
  agent_->Tick();
  EXPECT_TRUE(link_->reports.empty());
  link_->report_status = grpc::Status::OK;
  agent_->Tick();
  ASSERT_EQ(link_->reports.size(), 2u);
  EXPECT_EQ(link_->reports[0].event(), v1::ReportRankStatusRequest::EVENT_STARTED);
  EXPECT_EQ(link_->reports[1].event(), v1::ReportRankStatusRequest::EVENT_EXITED);
}

TEST_F(AgentTest, ABrokenStreamIsOpenedAgainAtTheNextHeartbeat) {
  agent_->Tick();
  link_->broken = true;
  clock_.Advance(absl::Milliseconds(499));
  agent_->Tick();
  EXPECT_EQ(link_->opened.size(), 1u);
  clock_.Advance(absl::Milliseconds(1));
  agent_->Tick();
  EXPECT_EQ(link_->opened.size(), 2u);
  EXPECT_EQ(link_->opened.back(), 1) << "the same session: the registration holds";
}

// Leases (docs/fault-model.md): a worker that cannot reach the coordinator stops its ranks once the
// lease has run out, counted from the sending of its last successful heartbeat.
TEST_F(AgentTest, ARankIsStoppedOnceTheLeaseRunsOutAndItsExitReportedOnReturn) {
  link_->lease_ms = 3000;
  agent_->Tick();  // Registered at t=0 (lease from 0); the first heartbeat also at t=0.
  link_->incoming = {Start(1, 0), Start(2, 1)};
  agent_->Tick();
  ASSERT_THAT(ranks_->started, ElementsAre(0, 1));
  clock_.Advance(absl::Milliseconds(500));
  agent_->Tick();  // Heartbeat at t=500 succeeds: the lease now runs to t=3500.
  // The coordinator becomes unreachable (a blackhole: every call fails).
  link_->heartbeat_status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline");
  link_->register_status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline");
  for (int t = 600; t <= 3500; t += 100) {
    clock_.Advance(absl::Milliseconds(100));
    agent_->Tick();
  }
  EXPECT_TRUE(ranks_->stopped.empty()) << "still within the lease (t=3500)";
  clock_.Advance(absl::Milliseconds(100));
  agent_->Tick();
  ASSERT_THAT(ranks_->stopped, ElementsAre("job-000001")) << "t=3600: the lease ran out";
  EXPECT_THAT(ranks_->stopped_attempts, ElementsAre(1)) << "exactly the attempt it runs";
  EXPECT_THAT(ranks_->stop_reasons[0], HasSubstr("longer than the worker's lease of 3s"));
  clock_.Advance(absl::Seconds(5));
  agent_->Tick();
  EXPECT_EQ(ranks_->stopped.size(), 1u) << "stopped once per expiry";
  // The ranks exit (SIGTERM); the coordinator is back: the exits go with the registration.
  ranks_->Exit(0, -15);
  ranks_->Exit(1, -15);
  clock_.Advance(absl::Milliseconds(100));
  agent_->Tick();
  link_->heartbeat_status = grpc::Status::OK;
  link_->register_status = grpc::Status::OK;
  clock_.Advance(absl::Seconds(2));
  agent_->Tick();
  ASSERT_GE(link_->registrations.size(), 2u);
  EXPECT_EQ(link_->registrations.back().running_size(), 0);
  EXPECT_EQ(link_->registrations.back().exited_size(), 2);
}

TEST_F(AgentTest, HeartbeatsThatGetThroughRenewTheLease) {
  link_->lease_ms = 1000;
  agent_->Tick();
  link_->incoming = {Start(1, 0)};
  agent_->Tick();
  for (int i = 0; i < 100; ++i) {  // 10 s, a heartbeat every 500 ms.
    clock_.Advance(absl::Milliseconds(100));
    agent_->Tick();
  }
  EXPECT_TRUE(ranks_->stopped.empty());
  // Without a lease (an older coordinator) ranks run on however long the coordinator is away.
  link_->lease_ms = 0;
  link_->heartbeat_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
  clock_.Advance(absl::Milliseconds(500));
  agent_->Tick();  // The heartbeat fails: registering again (lease 0 from now on).
  link_->heartbeat_status = grpc::Status::OK;
  agent_->Tick();
  link_->heartbeat_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
  link_->register_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
  for (int i = 0; i < 100; ++i) {
    clock_.Advance(absl::Milliseconds(100));
    agent_->Tick();
  }
  EXPECT_TRUE(ranks_->stopped.empty());
}

// Monotonic deadlines: the wall clock stepping back a minute (NTP, a VM resume) does not lengthen the
// lease, and stepping it forward does not end it early.
TEST_F(AgentTest, WallClockStepsNeitherLengthenNorShortenTheLease) {
  link_->lease_ms = 3000;
  agent_->Tick();
  link_->incoming = {Start(1, 0)};
  agent_->Tick();
  link_->heartbeat_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
  link_->register_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
  clock_.StepWall(absl::Seconds(60));
  for (int t = 100; t <= 3000; t += 100) {
    clock_.Advance(absl::Milliseconds(100));
    agent_->Tick();
  }
  EXPECT_TRUE(ranks_->stopped.empty()) << "a forward wall step ended nothing";
  clock_.StepWall(absl::Seconds(-120));
  clock_.Advance(absl::Milliseconds(100));
  agent_->Tick();
  EXPECT_THAT(ranks_->stopped, ElementsAre("job-000001")) << "t=3100: ran out, whatever the wall clock says";
}

// The loop makes blocking calls (Register 3 s); the lease check runs right after each, so the ranks are
// told to stop at most one call late, and the registration states that delay (twice: SIGTERM and
// SIGKILL each), for the coordinator's fence.
TEST_F(AgentTest, ALeaseRunningOutDuringABlockingCallIsSeenRightAfterIt) {
  link_->lease_ms = 3000;
  agent_->Tick();  // Registered and a heartbeat at t=0: the lease runs to t=3000.
  ASSERT_EQ(link_->registrations.size(), 1u);
  EXPECT_EQ(link_->registrations[0].stop_delay_ms(), 2 * (3000 + 100));
  link_->incoming = {Start(1, 0)};
  agent_->Tick();
  // From t=500 every call fails after 3 s.
  link_->heartbeat_status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline");
  link_->register_status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline");
  link_->blocks = [&] { clock_.Advance(absl::Seconds(3)); };
  clock_.Advance(absl::Milliseconds(500));
  const absl::Time start = clock_.Now() - absl::Milliseconds(500);
  agent_->Tick();  // The heartbeat at t=500 returns at t=3500: the lease ran out meanwhile.
  ASSERT_THAT(ranks_->stopped, ElementsAre("job-000001")) << "seen as the call returned, within the round";
  EXPECT_LE(clock_.Now() - start, absl::Seconds(3) + absl::Seconds(3) + absl::Milliseconds(100))
      << "at most one blocking call (and a round) past the lease";
}

}  // namespace
}  // namespace tessera::worker
