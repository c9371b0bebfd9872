// Several hosts (tests/multi_host_fixture.h): parallel jobs across them equal the single-process run,
// storage failures, worker names, and the test hosts' own promise.
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

TEST_F(MultiHostTest, DataParallelJobAcrossTwoHostsEqualsTheSingleProcessRun) {
  StartTwoWorkers();
  // Each worker found its own address on the test network (no --host given).
  EXPECT_THAT(Log("node1.1.log"), HasSubstr("ranks bind to " + hosts_->address(1)));
  EXPECT_THAT(Log("node2.2.log"), HasSubstr("ranks bind to " + hosts_->address(2)));

  const std::string out = dir_ + "/out";
  auto r = Cli({"submit", spec_, "--follow", "--set", "output_dir=" + out});
  ASSERT_EQ(r.exit_code, 0) << r.output << Log("node1.1.log") << Log("node2.2.log");
  EXPECT_THAT(r.output, HasSubstr("SUCCEEDED"));
  // Rank 0 and rank 1 ran on different hosts: each rank log says which worker started it.
  auto job = nlohmann::json::parse(Cli({"--output=json", "job", "job-000001"}).output, nullptr, false);
  ASSERT_FALSE(job.is_discarded());
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED");

  // The reference: the same spec in one process (dp 1, the same global batch) on this machine.
  auto ref = testing::RunTessera({"run", spec_, "--quiet", "--threads-per-rank=1", "--set", "parallel.dp=1",
                                  "--set", "output_dir=" + dir_ + "/ref"});
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const testing::Tolerances tol;  // fp32: loss atol 1e-5 / rtol 1e-3, grads 1e-6 / 1e-4, weights 1e-5 / 1e-4.
  const auto want = testing::ReadLosses(dir_ + "/ref/steps.jsonl");
  const auto got = testing::ReadLosses(out + "/steps.jsonl");
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(got.size(), 8u);
  for (const auto& [step, loss] : want) {
    EXPECT_NEAR(got.at(step), loss, tol.loss_atol + tol.loss_rtol * std::abs(loss)) << "loss of step " << step;
  }
  EXPECT_LT(want.at(8), want.at(1)) << "the reference learns";
  const auto want_norm = testing::ReadStepField(dir_ + "/ref/steps.jsonl", "grad_norm");
  const auto got_norm = testing::ReadStepField(out + "/steps.jsonl", "grad_norm");
  for (const auto& [step, norm] : want_norm) {
    EXPECT_NEAR(got_norm.at(step), norm, tol.grad_atol + tol.grad_rtol * norm) << "grad_norm of step " << step;
  }
  // The weights after the last step (the final checkpoints hold full fp32 tensors by name).
  const auto want_w = testing::ReadF32(dir_ + "/ref/checkpoints/step_00000008/model.safetensors");
  const auto got_w = testing::ReadF32(out + "/checkpoints/step_00000008/model.safetensors");
  ASSERT_FALSE(want_w.empty());
  testing::ExpectTensorsClose(want_w, got_w, "", tol.weight_atol, tol.weight_rtol, static_cast<int>(want_w.size()));
}

TEST_F(MultiHostTest, DataAndTensorParallelJobAcrossTwoHostsOfTwoDevicesEqualsTheSingleProcessRun) {
  StartWorker(1, "cpu:2");
  StartWorker(2, "cpu:2");
  ASSERT_TRUE(WaitFor([&] {
    const std::string out = Cli({"workers"}).output;
    return out.find("node1") != std::string::npos && out.find("node2") != std::string::npos;
  }, 20)) << Cli({"workers"}).output;
  const std::string out = dir_ + "/out";
  auto r = Cli({"submit", spec_, "--follow", "--set", "parallel.tp=2", "--set", "output_dir=" + out});
  ASSERT_EQ(r.exit_code, 0) << r.output << Log("node1.1.log") << Log("node2.2.log");
  // Tensor parallel stays inside a node: ranks 0 and 1 (one tp group) on one host, 2 and 3 on the other.
  const nlohmann::json job = Job("job-000001");
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED");
  std::map<int, std::string> worker_of;
  for (const auto& p : job["placement"]) worker_of[p.value("rank", 0)] = p.value("worker_id", "");
  ASSERT_EQ(worker_of.size(), 4u) << job.dump();
  EXPECT_EQ(worker_of[0], worker_of[1]);
  EXPECT_EQ(worker_of[2], worker_of[3]);
  EXPECT_NE(worker_of[0], worker_of[2]);

  ExpectLossesOfTheSingleProcessRun(out, {}, 8);
  const testing::Tolerances tol;  // fp32: grads atol 1e-6 / rtol 1e-4, weights 1e-5 / 1e-4.
  const auto want_norm = testing::ReadStepField(dir_ + "/ref/steps.jsonl", "grad_norm");
  const auto got_norm = testing::ReadStepField(out + "/steps.jsonl", "grad_norm");
  ASSERT_EQ(got_norm.size(), want_norm.size());
  for (const auto& [step, norm] : want_norm) {
    EXPECT_NEAR(got_norm.at(step), norm, tol.grad_atol + tol.grad_rtol * norm) << "grad_norm of step " << step;
  }
  // The weights after the last step: the checkpoint holds full (gathered) tensors by name. tp sums
  // partial products in another order (~1e-7 relative); where a gradient element is near zero, Adam's
  // normalized update turns that into up to a fraction of lr per step, so after 8 steps at lr 2e-3
  // weights agree to atol lr/20 = 1e-4 (a missing or doubled tp reduction moves them by ~lr per step
  // and changes the losses above).
  const auto want_w = testing::ReadF32(dir_ + "/ref/checkpoints/step_00000008/model.safetensors");
  const auto got_w = testing::ReadF32(out + "/checkpoints/step_00000008/model.safetensors");
  ASSERT_FALSE(want_w.empty());
  testing::ExpectTensorsClose(want_w, got_w, "", /*atol=*/1e-4, tol.weight_rtol, static_cast<int>(want_w.size()));
  EXPECT_EQ(RanksLeft(), 0);
}

// The output root fills up while a checkpoint is written (rank 1's optimizer shard, on the other
// host, or rank 0's files): the checkpoint is not committed, the previous one stays intact, the
// attempt fails naming the full disk, and once space returns the job resumes from the previous
// checkpoint to the undisturbed run's losses.
TEST_F(MultiHostTest, FullDiskDuringACheckpointKeepsThePreviousOneAndTheJobResumes) {
  const std::string out = dir_ + "/out";
  fs::create_directories(out);
  auto mount = testing::RunCommand({"mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", out});
  ASSERT_EQ(mount.exit_code, 0) << mount.output;
  mounted_ = out;
  StartTwoWorkers();  // After the mount: their namespaces see it.
  const std::vector<std::string> zero = {"parallel.zero_stage=1"};  // Every rank writes a shard.
  ASSERT_EQ(StartLongJob(zero), out);
  const std::string id = "job-000001";
  // Leave room for half a checkpoint more than is used now: the one of step 40 cannot be written.
  int64_t checkpoint_bytes = 0;
  for (const auto& f : fs::directory_iterator(out + "/checkpoints/step_00000020")) checkpoint_bytes += f.file_size();
  struct statvfs st;
  ASSERT_EQ(statvfs(out.c_str(), &st), 0);
  const int64_t used = static_cast<int64_t>(st.f_blocks - st.f_bfree) * static_cast<int64_t>(st.f_frsize);
  const int64_t limit = (used + checkpoint_bytes / 2 + 4095) / 4096 * 4096;
  auto shrink = testing::RunCommand({"mount", "-o", absl::StrCat("remount,size=", limit), out});
  ASSERT_EQ(shrink.exit_code, 0) << shrink.output;

  ASSERT_TRUE(WaitFor([&] { return Job(id).value("attempt", 0) >= 2 || Ended(Job(id)); }, 60)) << Job(id).dump();
  EXPECT_THAT(RankLogs(out), HasSubstr("checkpoint of step 40: ")) << RankLogs(out);
  EXPECT_THAT(RankLogs(out), HasSubstr("No space left on device"));
  // The previous checkpoint was neither pruned nor touched.
  EXPECT_TRUE(formats::checkpoint::VerifyCheckpoint(out + "/checkpoints/step_00000020").ok());
  EXPECT_FALSE(fs::exists(out + "/checkpoints/step_00000040"));

  auto grow = testing::RunCommand({"mount", "-o", "remount,size=64m", out});
  ASSERT_EQ(grow.exit_code, 0) << grow.output;
  ASSERT_TRUE(WaitFor([&] { return Ended(Job(id)); }, 120)) << "job stuck: " << Job(id).dump();
  EXPECT_EQ(Job(id).value("state", ""), "JOB_STATE_SUCCEEDED") << Job(id).dump();
  // From step 40, whose checkpoint failed, back to 20. Written in the background (checkpoint.async), the
  // failure shows when the write ends — at the latest when the checkpoint of step 60 waits for it — and
  // the attempt trains on meanwhile (22 steps were recomputed under load).
  ExpectRecomputedAtMost(Job(id), testing::CheckpointAsyncYaml().empty() ? 20 : 40);
  ExpectLossesOfTheSingleProcessRun(out, {"train.steps=200", "checkpoint.every_steps=20", "parallel.zero_stage=1"}, 200);
  EXPECT_TRUE(WaitFor([&] { return RanksLeft() == 0; }, 10)) << "no rank process left on any host";
}

// Two nodes started with the same --name: the second is refused, saying by whom the name is held,
// and the first keeps it; when the first dies, the second takes the name over within seconds.
TEST_F(MultiHostTest, ASecondWorkerUnderANameInUseIsRefusedUntilTheFirstIsGone) {
  StartWorker(1, "cpu:1");
  ASSERT_TRUE(WaitFor([&] { return Cli({"workers"}).output.find("node1") != std::string::npos; }, 20));
  StartWorker(2, "cpu:2", "node1");
  ASSERT_TRUE(WaitFor([&] {
    return Log("node1.2.log").find("registration refused: worker name node1 is in use by a live worker at " +
                                   hosts_->address(1)) != std::string::npos;
  }, 20)) << Log("node1.2.log");
  auto workers = nlohmann::json::parse(Cli({"--output=json", "workers"}).output, nullptr, false);
  ASSERT_FALSE(workers.is_discarded());
  ASSERT_EQ(workers["workers"].size(), 1u) << workers.dump();
  EXPECT_EQ(workers["workers"][0].value("host", ""), hosts_->address(1));
  hosts_->Kill(worker_pids_.at(1));
  EXPECT_TRUE(WaitFor([&] {
    auto w = nlohmann::json::parse(Cli({"--output=json", "workers"}).output, nullptr, false);
    return !w.is_discarded() && w["workers"].size() == 1 && w["workers"][0].value("host", "") == hosts_->address(2);
  }, 20)) << Cli({"workers"}).output;
}

TEST_F(MultiHostTest, HostsReachOnlyEachOther) {
  // The fixture's promise: addresses of their own, the others reachable, no route anywhere else.
  auto route = hosts_->Run(1, {"ip", "route", "show", "default"});
  EXPECT_EQ(route.exit_code, 0);
  EXPECT_EQ(route.output, "") << "no default route";
  auto addr = hosts_->Run(2, {"ip", "-4", "-o", "addr", "show", "dev", "eth0"});
  EXPECT_THAT(addr.output, HasSubstr(hosts_->address(2) + "/24"));
  // The coordinator on host 0 answers host 1's CLI, and stops answering when host 1 is cut off.
  EXPECT_EQ(Cli({"jobs"}).exit_code, 0);
  std::vector<std::string> from1 = {testing::Runfile("client/tessera"), "--coordinator=" + coordinator_};
  for (const std::string& f : certs_->CliFlags(testing::ClusterCerts::UserOf(dir_))) from1.push_back(f);
  from1.push_back("jobs");
  EXPECT_EQ(hosts_->Run(1, from1).exit_code, 0);
  ASSERT_TRUE(hosts_->CutOff(1).ok());
  EXPECT_NE(hosts_->Run(1, from1).exit_code, 0) << "host 1 is cut off";
  ASSERT_TRUE(hosts_->Heal(1).ok());
  EXPECT_TRUE(WaitFor([&] { return hosts_->Run(1, from1).exit_code == 0; }, 10)) << "host 1 is back";
}

}  // namespace
}  // namespace tessera
