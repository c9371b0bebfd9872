// CoordinatorTest: the fixture of the coordinator's unit tests — a Coordinator on a real JobStore
// (a temp SQLite file) whose workers are played by the test through the calls the worker daemon makes.
// Time is a FakeClock: a test moves it with clock_.Advance() (no test sleeps), and it keeps running
// across Restart() as a real clock would.
#ifndef TESSERA_COORDINATOR_COORDINATOR_TEST_FIXTURE_H_
#define TESSERA_COORDINATOR_COORDINATOR_TEST_FIXTURE_H_

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "spec/job_spec.h"
#include "common/time/fake_clock.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/coord_" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::filesystem::remove(db_);
    Restart();
  }
  // Every test's events leave the scheduling indexes as a recount from scratch would.
  void TearDown() override {
    if (c_ != nullptr) {
      EXPECT_TRUE(c_->VerifyIndexes().ok()) << c_->VerifyIndexes();
    }
  }
  void Restart() {
    if (c_ != nullptr) {
      EXPECT_TRUE(c_->VerifyIndexes().ok()) << c_->VerifyIndexes();
    }
    c_.reset();
    auto store = JobStore::Open({db_});
    ASSERT_TRUE(store.ok());
    CoordinatorOptions o;
    o.heartbeat_timeout = absl::Milliseconds(200);
    o.name_hold = absl::Milliseconds(100);
    o.worker_lease = absl::Milliseconds(100);
    o.start_timeout = start_timeout_;
    o.backfill_limit = backfill_limit_;
    o.clock = &clock_;
    o.policy = policy_;
    o.before_fast_beat_for_test = [this] {
      if (before_fast_beat_) before_fast_beat_();
    };
    o.on_scheduled = [this](absl::Duration waited) { scheduled_waits_.push_back(waited); };
    c_ = std::make_unique<Coordinator>(o, std::move(*store));
    ASSERT_TRUE(c_->Recover().ok());
  }
  // Each call's job writes into a directory of its own (live jobs may not share one).
  v1::JobSpec Spec(int dp, int tp) {
    auto spec = spec::ParseJobSpec(
        "name: t\ndata: {path: /x.bin}\nmodel: {heads: 4}\ntrain: {micro_batch: 1, global_batch: 4}\n",
        {"parallel.dp=" + std::to_string(dp), "parallel.tp=" + std::to_string(tp),
         "output_dir=out/t" + std::to_string(++specs_)});
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }
  static v1::RegisterWorkerRequest Registration(const std::string& name, int devices) {
    v1::RegisterWorkerRequest r;
    r.set_name(name);
    r.set_device_kind(v1::DEVICE_KIND_CPU);
    r.set_device_count(devices);
    r.set_host("127.0.0.1");
    r.set_store_port_min(30000);
    r.set_store_port_max(30010);
    // A lost worker's fence: last heartbeat + lease + stop grace + stop delay + kFenceSlack (1 s).
    r.set_stop_grace_ms(100);
    r.set_stop_delay_ms(100);
    return r;
  }
  // Registers a worker; its session is kept in sessions_[name].
  std::string AddWorker(const std::string& name, int devices) {
    auto resp = c_->RegisterWorker(Registration(name, devices));
    EXPECT_TRUE(resp.ok()) << resp.status();
    sessions_[name] = resp->session();
    return resp->worker_id();
  }
  // Advances the clock by `d` in steps of 50 ms, `alive` heartbeating at each, liveness checked.
  void AdvanceWithHeartbeats(absl::Duration d, const std::vector<std::string>& alive) {
    for (absl::Duration t = absl::ZeroDuration(); t < d; t += absl::Milliseconds(50)) {
      clock_.Advance(absl::Milliseconds(50));
      for (const std::string& w : alive) EXPECT_TRUE(c_->Heartbeat(w).ok()) << w;
      c_->CheckLiveness();
    }
  }
  // The orders the worker gets now, once every change made so far is durable (START orders wait for
  // their attempt's row: coordinator/store_writer.h).
  std::vector<v1::Assignment> Drain(const std::string& worker) {
    EXPECT_TRUE(c_->WaitForStore().ok());
    EXPECT_TRUE(c_->VerifyIndexes().ok()) << c_->VerifyIndexes();
    std::vector<v1::Assignment> out;
    while (true) {
      auto a = c_->NextAssignment(worker, absl::ZeroDuration());
      if (!a.ok() || !a->has_value()) return out;
      out.push_back(**a);
    }
  }
  void Report(const std::string& worker, const v1::Assignment& a, v1::ReportRankStatusRequest::Event ev,
              int code = 0) {
    v1::ReportRankStatusRequest r;
    r.set_worker_id(worker);
    r.set_job_id(a.job_id());
    r.set_attempt(a.attempt());
    r.set_rank(a.rank());
    r.set_event(ev);
    r.set_exit_code(code);
    r.set_error("error: boom");
    ASSERT_TRUE(c_->ReportRankStatus(r).ok());
  }
  v1::JobState State(const std::string& id) { return c_->GetJob(id)->state(); }

  // A dp=2 job allowed `max_restarts` placed on new workers "a" and "b" (one device each), both ranks
  // reported STARTED: its id and the two START assignments.
  void RunningOnAAndB(int max_restarts, std::string* id, v1::Assignment* on_a, v1::Assignment* on_b) {
    AddWorker("a", 1);
    AddWorker("b", 1);
    auto job = c_->Submit(Spec(2, 1), max_restarts);
    ASSERT_TRUE(job.ok()) << job.status();
    *id = job->id();
    auto to_a = Drain("a"), to_b = Drain("b");
    ASSERT_EQ(to_a.size(), 1u);
    ASSERT_EQ(to_b.size(), 1u);
    *on_a = to_a[0];
    *on_b = to_b[0];
    Report("a", *on_a, v1::ReportRankStatusRequest::EVENT_STARTED);
    Report("b", *on_b, v1::ReportRankStatusRequest::EVENT_STARTED);
  }
  // `worker` registers again (as after a coordinator restart) listing the rank of `placed` as running.
  // Its new session is kept in sessions_[worker].
  void RegisterRunning(const std::string& worker, const v1::Assignment& placed) {
    v1::RegisterWorkerRequest r = Registration(worker, 1);
    auto* running = r.add_running();
    running->set_job_id(placed.job_id());
    running->set_attempt(placed.attempt());
    running->set_rank(placed.rank());
    auto resp = c_->RegisterWorker(r);
    ASSERT_TRUE(resp.ok()) << resp.status();
    sessions_[worker] = resp->session();
  }
  // A job (dp=1, `max_restarts`) running on a new worker b, a new idle worker c, and b lost (silent
  // for the heartbeat timeout): the job is fenced. Returns its id and b's START order.
  void RunningOnBThenBLost(int max_restarts, std::string* id, v1::Assignment* on_b) {
    AddWorker("b", 1);
    auto job = c_->Submit(Spec(1, 1), max_restarts);
    ASSERT_TRUE(job.ok()) << job.status();
    *id = job->id();
    auto placed = Drain("b");
    ASSERT_EQ(placed.size(), 1u);
    *on_b = placed[0];
    Report("b", *on_b, v1::ReportRankStatusRequest::EVENT_STARTED);
    AddWorker("c", 1);
    AdvanceWithHeartbeats(absl::Milliseconds(250), {"c"});
    ASSERT_EQ(State(*id), v1::JOB_STATE_PENDING);
  }

  // RunningOnAAndB allowing one restart, then the coordinator restarts, a registers again with its
  // rank running (adopted) and that rank exits with an error before b is back: RESTARTING.
  void AdoptedAttemptFailedOnA(std::string* id, v1::Assignment* on_a, v1::Assignment* on_b) {
    ASSERT_NO_FATAL_FAILURE(RunningOnAAndB(1, id, on_a, on_b));
    Restart();
    ASSERT_NO_FATAL_FAILURE(RegisterRunning("a", *on_a));
    Report("a", *on_a, v1::ReportRankStatusRequest::EVENT_EXITED, 1);
    ASSERT_EQ(State(*id), v1::JOB_STATE_RESTARTING);
  }

  std::string db_;
  FakeClock clock_;
  std::function<void()> before_fast_beat_;  // CoordinatorOptions::before_fast_beat_for_test.
  std::vector<absl::Duration> scheduled_waits_;  // CoordinatorOptions::on_scheduled's, in order.
  std::unique_ptr<Coordinator> c_;
  int specs_ = 0;  // Spec() calls so far.
  std::map<std::string, int64_t> sessions_;  // Of each worker's newest AddWorker.
  absl::Duration start_timeout_ = absl::Minutes(2), backfill_limit_ = absl::Minutes(10);
  SchedulingPolicy policy_;  // The options' policy from the next Restart().
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_COORDINATOR_TEST_FIXTURE_H_
