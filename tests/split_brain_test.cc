// Split brain (docs/fault-model.md, "Leases and fencing"): a worker cut off from the coordinator only —
// its own ranks, the other hosts and the shared storage all still reachable — while every rank of its
// job runs on it, so no collective notices. Its lease makes it stop the ranks before the coordinator's
// fence lets the job be placed again elsewhere: never ranks of two attempts at once.
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/multi_host_fixture.h"

namespace tessera {
namespace {

using testing::WaitFor;

TEST_F(MultiHostTest, AWorkerCutOffFromTheCoordinatorOnlyNeverOverlapsTheNextAttempt) {
  // node1 (two devices) takes the whole dp=2 job; node2 joins once it runs, so that it is free.
  StartWorker(1, "cpu:2");
  ASSERT_TRUE(WaitFor([&] { return Cli({"workers"}).output.find("node1") != std::string::npos; }, 20));
  // Long enough to be training through the whole cut (~40 steps/s here).
  const std::vector<std::string> sets = {"train.steps=2000", "checkpoint.every_steps=100"};
  const std::string out = dir_ + "/out";
  std::vector<std::string> submit = {"submit", spec_, "--max-restarts=3", "--set", "output_dir=" + out};
  for (const std::string& s : sets) submit.push_back("--set"), submit.push_back(s);
  ASSERT_EQ(Cli(submit).exit_code, 0);
  const std::string id = "job-000001";
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(out + "/checkpoints/step_00000100"); }, 120))
      << Job(id).dump();
  for (const auto& p : Job(id)["placement"]) ASSERT_EQ(p.value("worker_id", ""), "node1") << Job(id).dump();
  StartWorker(2, "cpu:2");
  ASSERT_TRUE(WaitFor([&] { return Cli({"workers"}).output.find("node2") != std::string::npos; }, 20));

  // Cut node1 off the coordinator (host 0) only, for 6 × the 5 s heartbeat timeout, sampling which
  // attempts have live rank processes (one process table: both hosts are sampled at once).
  ASSERT_EQ(AttemptsAlive(), std::set<int>{1}) << "attempt 1 trains when the cut begins";
  ASSERT_TRUE(hosts_->Blackhole(1, 0, true).ok());
  const auto cut = std::chrono::steady_clock::now();
  double overlap_s = 0, longest_overlap_s = 0;
  std::string seen;
  auto sample = [&](double period_s) {
    const std::set<int> alive = AttemptsAlive();
    if (alive.size() > 1) {
      overlap_s += period_s;
      longest_overlap_s = std::max(longest_overlap_s, overlap_s);
      seen = RankCommands();
    } else {
      overlap_s = 0;
    }
  };
  while (std::chrono::steady_clock::now() - cut < std::chrono::seconds(30)) {
    sample(0.2);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  nlohmann::json during = Job(id);
  EXPECT_GE(during.value("attempt", 0), 2) << "placed again while node1 was cut off: " << during.dump();
  ASSERT_TRUE(hosts_->Blackhole(1, 0, false).ok());
  ASSERT_TRUE(WaitFor([&] {
    sample(0.2);
    return Ended(Job(id));
  }, 240)) << "job stuck: " << Job(id).dump();
  EXPECT_LE(longest_overlap_s, 2.0) << "ranks of two attempts alive at once for " << longest_overlap_s
                                    << " s: " << seen;

  auto job = Job(id);
  ASSERT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  // Attempt 1 ended by node1's loss; the ranks node1 stopped say why when it is back.
  EXPECT_THAT(job["history"][0].value("reason", ""), ::testing::HasSubstr("node1 lost")) << job["history"].dump();
  EXPECT_THAT(RankLogs(out), ::testing::Not(::testing::HasSubstr("superseded"))) << "the lease, not the token, stopped them";
  // One attempt's lines only: every step once, in order, with the undisturbed losses.
  std::ifstream steps(out + "/steps.jsonl");
  std::vector<int64_t> logged;
  for (std::string line; std::getline(steps, line);) {
    logged.push_back(nlohmann::json::parse(line).value("step", int64_t{0}));
  }
  ASSERT_EQ(logged.size(), 2000u);
  for (size_t i = 0; i < logged.size(); ++i) ASSERT_EQ(logged[i], static_cast<int64_t>(i + 1)) << "line " << i;
  ExpectLossesOfTheSingleProcessRun(out, sets, 2000);
  // The new attempt's checkpoints are all there and intact (keep: 2): none pruned or replaced by the
  // cut-off attempt.
  auto kept = formats::checkpoint::ListCheckpoints(out + "/checkpoints");
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].first, 1900);
  EXPECT_EQ(kept[1].first, 2000);
  for (const auto& [step, path] : kept) EXPECT_TRUE(formats::checkpoint::VerifyCheckpoint(path).ok()) << path;
  EXPECT_TRUE(WaitFor([&] { return RanksLeft() == 0; }, 10)) << "no rank process left on any host";
}

}  // namespace
}  // namespace tessera
