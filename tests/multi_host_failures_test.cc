// Several hosts (tests/multi_host_fixture.h) failing: partitions, killed and restarted workers and
// coordinators, damaged checkpoints; each job ends as the undisturbed single-process run would.
#include <chrono>
#include <thread>

#include <signal.h>
#include <sys/statvfs.h>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/multi_host_fixture.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::WaitFor;

TEST_F(MultiHostTest, HostCutOffLongerThanTheTimeoutsRestartsTheJobWhichEndsAsUndisturbed) {
  StartTwoWorkers();
  const std::string out = StartLongJob();
  const std::string id = "job-000001";
  // Which host runs which rank, for the names the error must carry.
  std::string members = "members:";
  int r = 0;
  for (const auto& p : Job(id)["placement"]) {
    const int host = p.value("worker_id", "") == "node1" ? 1 : 2;
    members += absl::StrCat(r ? ", rank " : " rank ", r, " on ", hosts_->address(host));
    ++r;
  }
  ASSERT_TRUE(hosts_->CutOff(2).ok());
  const auto cut = std::chrono::steady_clock::now();
  // The rank left on host 1 ends its collective after the 4 s timeout, naming the group's hosts, and
  // the attempt fails (well before the default 300 s).
  ASSERT_TRUE(WaitFor([&] { return Job(id).value("state", "") != "JOB_STATE_RUNNING"; }, 20)) << Job(id).dump();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count(), 12.0);
  // Past the 5 s heartbeat timeout node2 is lost (waited for, not slept: at most 15 s).
  EXPECT_TRUE(WaitFor([&] { return Cli({"workers"}).output.find("LOST") != std::string::npos; }, 15))
      << Cli({"workers"}).output;
  ASSERT_TRUE(hosts_->Heal(2).ok());
  ASSERT_TRUE(WaitFor([&] { return Ended(Job(id)); }, 120)) << "job stuck: " << Job(id).dump();
  auto job = Job(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED");
  EXPECT_GE(job.value("attempt", 0), 2);
  std::string logs;
  for (int rank : {0, 1}) {
    std::ifstream in(absl::StrCat(out, "/logs/rank_", rank, ".log"));
    logs += std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  EXPECT_THAT(logs, HasSubstr(members)) << "a rank's error names every member's host";
  // The job's history blames the host that was cut off for its first attempt.
  ASSERT_GE(job["history"].size(), 2u) << job.dump();
  EXPECT_EQ(job["history"][0].value("failed_worker", ""), "node2") << job["history"].dump();
  EXPECT_EQ(job["history"][0].value("failed_host", ""), hosts_->address(2));
  ExpectRecomputedAtMost(job, 20);  // One checkpoint interval.
  ExpectLossesOfTheSingleProcessRun(out, kLongJob, 200);
  EXPECT_TRUE(WaitFor([&] { return RanksLeft() == 0; }, 10)) << "no rank process left on any host";
}

// A single-rank job (no peer whose collective would fail) loses its rank while its host is cut off:
// the worker cannot report the exit until the link is back, and must not lose it — else the job would
// stay RUNNING for ever. The report arrives after the heal (or the next heartbeat, which no longer
// lists the rank, fails the attempt); the job restarts from its checkpoint, the worker never counted
// as lost.
TEST_F(MultiHostTest, ARankExitDuringAPartitionIsNotLost) {
  StartWorker(1, "cpu:1");
  ASSERT_TRUE(WaitFor([&] { return Cli({"workers"}).output.find("node1") != std::string::npos; }, 20));
  const std::string out = StartLongJob({"parallel.dp=1"});
  const std::string id = "job-000001";
  const std::vector<pid_t> ranks = RankPids();
  ASSERT_EQ(ranks.size(), 1u);
  ASSERT_TRUE(hosts_->CutOff(1).ok());
  kill(ranks[0], SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // Below the 5 s heartbeat timeout.
  ASSERT_TRUE(hosts_->Heal(1).ok());
  ASSERT_TRUE(WaitFor([&] { return Ended(Job(id)); }, 120)) << "job stuck: " << Job(id).dump();
  auto job = Job(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  ASSERT_GE(job["history"].size(), 2u) << job.dump();
  EXPECT_EQ(job["history"][0].value("failed_worker", ""), "node1");
  EXPECT_THAT(job["history"][0].value("reason", ""), ::testing::AnyOf(HasSubstr("exited with code -9"),
                                                                     HasSubstr("no longer has rank 0")));
  EXPECT_THAT(Cli({"workers"}).output, ::testing::Not(HasSubstr("LOST")));
  ExpectRecomputedAtMost(job, 20);
  ExpectLossesOfTheSingleProcessRun(out, {"train.steps=200", "checkpoint.every_steps=20"}, 200);
  EXPECT_TRUE(WaitFor([&] { return RanksLeft() == 0; }, 10)) << "no rank process left on any host";
}

TEST_F(MultiHostTest, HostCutOffBrieflyLosesNothing) {
  StartTwoWorkers();
  const std::string out = StartLongJob();
  const std::string id = "job-000001";
  // 1 s: shorter than the ranks' 4 s collective timeout and the coordinator's 5 s heartbeat timeout.
  // A lost segment is retransmitted 0.2, 0.6, 1.4, 3.0 s after it was first sent (TCP's doubling RTO
  // from 200 ms), so after a 1 s cut traffic resumes at 1.4 s; after a 1.5 s cut it resumed only at
  // 3.0 s, and on a loaded CI machine a collective then overran its 4 s once (a restart).
  ASSERT_TRUE(hosts_->CutOff(2).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ASSERT_TRUE(hosts_->Heal(2).ok());
  ASSERT_TRUE(WaitFor([&] { return Ended(Job(id)); }, 120)) << "job stuck: " << Job(id).dump();
  auto job = Job(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(job.value("attempt", 0), 1) << "no restart: " << job.dump();
  ExpectLossesOfTheSingleProcessRun(out, kLongJob, 200);
  EXPECT_TRUE(WaitFor([&] { return RanksLeft() == 0; }, 10)) << "no rank process left on any host";
}

// SIGKILL of a worker daemon mid-job (its rank dies with it), the coordinator SIGKILLed and restarted
// while the job is failing, and the newest checkpoint damaged: the job resumes on the two nodes still
// alive (three were registered), from the newest undamaged checkpoint, to the undisturbed losses.
TEST_F(MultiHostTest, WorkerAndCoordinatorKilledAndADamagedCheckpointTheJobEndsAsUndisturbed) {
  StartWorker(1, "cpu:1");
  StartWorker(2, "cpu:1");
  StartWorker(3, "cpu:1");
  ASSERT_TRUE(WaitFor([&] {
    const std::string out = Cli({"workers"}).output;
    return out.find("node1") != std::string::npos && out.find("node2") != std::string::npos &&
           out.find("node3") != std::string::npos;
  }, 20)) << Cli({"workers"}).output;
  const std::string out = StartLongJob();
  const std::string id = "job-000001";
  ASSERT_TRUE(WaitFor([&] { return fs::exists(out + "/checkpoints/step_00000040"); }, 60)) << Job(id).dump();
  const std::string victim = Job(id)["placement"][1].value("worker_id", "");
  ASSERT_THAT(victim, ::testing::StartsWith("node"));
  const int victim_host = victim.back() - '0';

  hosts_->Kill(worker_pids_.at(victim_host));
  hosts_->Kill(coordinator_pid_);
  // The survivor's rank may still commit a checkpoint whose votes were all cast before the kill (with
  // checkpoint.async its write ends in the background): the newest checkpoint is known once the first
  // attempt's ranks are gone (the coordinator, down, starts no other). Damage it then.
  ASSERT_TRUE(WaitFor([&] { return testing::ProcessesMatching({"tessera-rank", dir_ + "/", "/attempt_1/"}).empty(); }, 60))
      << RankCommands();
  auto all = formats::checkpoint::ListCheckpoints(out + "/checkpoints");
  ASSERT_FALSE(all.empty());
  const int64_t damaged_step = all.back().first;
  fs::resize_file(all.back().second + "/model.safetensors", 1000);
  StartCoordinator();

  ASSERT_TRUE(WaitFor([&] { return Ended(Job(id)); }, 150)) << "job stuck: " << Job(id).dump();
  auto job = Job(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  EXPECT_GE(job.value("attempt", 0), 2);
  for (const auto& p : job["placement"]) EXPECT_NE(p.value("worker_id", ""), victim) << "resumed on the others";
  // The history blames the killed node, with its address, for the attempt that failed.
  ASSERT_GE(job["history"].size(), 2u) << job.dump();
  EXPECT_EQ(job["history"][0].value("outcome", ""), "JOB_STATE_FAILED");
  EXPECT_EQ(job["history"][0].value("failed_worker", ""), victim) << job["history"].dump();
  EXPECT_EQ(job["history"][0].value("failed_host", ""), hosts_->address(victim_host));
  EXPECT_EQ(job["history"].back().value("outcome", ""), "JOB_STATE_SUCCEEDED");
  EXPECT_THAT(Cli({"job", id}).output, HasSubstr(absl::StrCat(victim, " (", hosts_->address(victim_host), ")")));
  const std::string damaged = formats::checkpoint::CheckpointName(damaged_step);
  EXPECT_THAT(RankLogs(out), HasSubstr(absl::StrCat(damaged, " is damaged: model.safetensors has 1000 bytes")));
  // And where the user looks: the job's warnings (`tessera job`, from rank 0's warning line).
  EXPECT_THAT(job["progress"].value("warnings", nlohmann::json::array()).dump(),
              HasSubstr(absl::StrCat(damaged, " is damaged: model.safetensors has 1000 bytes")));
  EXPECT_THAT(Cli({"job", id}).output,
              HasSubstr(absl::StrCat("warning: checkpoint ", out, "/checkpoints/", damaged, " is damaged")));
  // The damaged checkpoint costs one interval more (the history shows where the attempt really
  // resumed, not the damaged newest one).
  ExpectRecomputedAtMost(job, 40);
  EXPECT_EQ(job["history"].back().value("resumed_from_step", ""), std::to_string(damaged_step - 20));
  ExpectLossesOfTheSingleProcessRun(out, kLongJob, 200);
  EXPECT_TRUE(WaitFor([&] { return RanksLeft() == 0; }, 10)) << "no rank process left on any host";
}

// A worker daemon SIGKILLed (its rank dies with it, by its parent-death signal) and started again at
// once, as systemd's Restart= does, well inside the coordinator's 5 s heartbeat timeout: it was never
// lost, so only its registration can tell that the rank of the running attempt is gone. The attempt
// fails then (not after the other rank's 4 s collective timeout alone, and never stays RUNNING), and
// the job resumes on the same two hosts to the undisturbed losses.
TEST_F(MultiHostTest, AWorkerRestartedFasterThanTheHeartbeatTimeoutRestartsItsJob) {
  StartTwoWorkers();
  const std::string out = StartLongJob();
  const std::string id = "job-000001";
  ASSERT_EQ(Job(id).value("attempt", 0), 1);
  hosts_->Kill(worker_pids_.at(2));
  const auto killed = std::chrono::steady_clock::now();
  StartWorker(2, "cpu:1");
  ASSERT_TRUE(WaitFor([&] { return Job(id).value("attempt", 0) >= 2; }, 15)) << Job(id).dump();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count(), 15.0);
  ASSERT_TRUE(WaitFor([&] { return Ended(Job(id)); }, 120)) << "job stuck: " << Job(id).dump();
  auto job = Job(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  ASSERT_GE(job["history"].size(), 2u) << job.dump();
  // Blamed on node2, the host that failed: node1's rank may have reported its broken collective
  // first, but node2's registration without its rank names the cause.
  EXPECT_EQ(job["history"][0].value("failed_worker", ""), "node2") << job["history"].dump();
  EXPECT_EQ(job["history"][0].value("failed_host", ""), hosts_->address(2));
  EXPECT_THAT(Cli({"workers"}).output, ::testing::Not(HasSubstr("LOST"))) << "never lost: back within 5 s";
  ExpectRecomputedAtMost(job, 20);
  ExpectLossesOfTheSingleProcessRun(out, kLongJob, 200);
  EXPECT_TRUE(WaitFor([&] { return RanksLeft() == 0; }, 10)) << "no rank process left on any host";
}

// The coordinator SIGKILLed while a host is cut off, started again during the partition, and the host
// healed after it has been lost: the restarted coordinator learns of the failed attempt from the
// surviving worker's re-registration (the exit it could not report), waits for the lost host, and
// runs one attempt at a time — no rank of the failed attempt is alive once the next one has ranks.
TEST_F(MultiHostTest, CoordinatorRestartedDuringAPartitionRunsOneAttemptAtATime) {
  StartTwoWorkers();
  const std::string out = StartLongJob();
  const std::string id = "job-000001";
  ASSERT_TRUE(hosts_->CutOff(2).ok());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  hosts_->Kill(coordinator_pid_);
  std::this_thread::sleep_for(std::chrono::seconds(4));  // The ranks' 4 s collective timeout passes.
  StartCoordinator();
  // The attempt ends by node1's report of its rank's failed collective, or at the latest when the
  // restarted coordinator stops waiting for node2 to report its rank (two heartbeat timeouts, 10 s).
  ASSERT_TRUE(WaitFor([&] { return Job(id).value("state", "") != "JOB_STATE_RUNNING"; }, 15)) << Job(id).dump();
  ASSERT_TRUE(WaitFor([&] { return Job(id)["history"][0].value("failed_worker", "") == "node2"; }, 15))
      << "blamed on the host that was cut off: " << Job(id)["history"].dump();
  // Every rank of the failed attempt ended by its collective timeout long ago, on either side of the
  // cut (a rank must not linger in its exit path, e.g. on the unreachable store).
  EXPECT_EQ(AttemptsAlive().count(1), 0u) << "a rank of attempt 1 is alive " << RankCommands();
  ASSERT_TRUE(hosts_->Heal(2).ok());
  size_t most_attempts = 0;
  std::string seen;
  ASSERT_TRUE(WaitFor([&] {
    const std::set<int> alive = AttemptsAlive();
    if (alive.size() > most_attempts) most_attempts = alive.size(), seen = RankCommands();
    return Ended(Job(id));
  }, 150)) << "job stuck: " << Job(id).dump();
  EXPECT_LE(most_attempts, 1u) << "ranks of two attempts alive at once: " << seen;
  auto job = Job(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  ASSERT_GE(job["history"].size(), 2u) << job.dump();
  EXPECT_EQ(job["history"][0].value("outcome", ""), "JOB_STATE_FAILED") << job["history"].dump();
  EXPECT_FALSE(job["history"][0].value("reason", "").empty()) << job["history"].dump();
  ExpectRecomputedAtMost(job, 20);
  ExpectLossesOfTheSingleProcessRun(out, kLongJob, 200);
  EXPECT_TRUE(WaitFor([&] { return RanksLeft() == 0; }, 10)) << "no rank process left on any host";
}

}  // namespace
}  // namespace tessera
