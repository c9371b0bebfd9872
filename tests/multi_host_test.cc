// A cluster of several hosts: tessera-coordinator and tessera-worker daemons each in a network
// namespace of its own (tests/testing/test_hosts.h, addresses 198.18.0.x, no default route), the real
// CLI, real rank processes; the filesystem is shared, as a cluster's storage would be. Skips with the
// reason where namespaces cannot be made (not root, no iproute2).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <signal.h>
#include <sys/statvfs.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "parallel/checkpoint/checkpoint_dir.h"
#include "tests/testing/cli.h"
#include "tests/testing/cluster_certs.h"
#include "tests/testing/compare.h"
#include "tests/testing/test_hosts.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::WaitFor;

// Host 0 runs the coordinator (and the CLI); hosts 1.. run one worker each.
class MultiHostTest : public ::testing::Test {
 protected:
  static constexpr int kPort = 7070;

  void SetUp() override {
    auto hosts = testing::TestHosts::Create(4);
    if (!hosts.ok()) GTEST_SKIP() << "no test hosts on this machine: " << hosts.status().message();
    hosts_ = std::move(*hosts);
    dir_ = testing::FreshDir(std::string("multi_host_") +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    coordinator_ = absl::StrCat(hosts_->address(0), ":", kPort);
    // Every daemon and the CLI talk mutual TLS (the coordinator serves a non-loopback address).
    certs_ = std::make_unique<testing::ClusterCerts>(dir_ + "/certs");
    StartCoordinator();
    data_ = testing::WriteTokenFile(dir_, 40000);
    spec_ = dir_ + "/spec.yaml";
    std::ofstream(spec_) << "name: multi-host\n"
                         << "model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32}\n"
                         << "data: {path: " << data_ << "}\n"
                         << "parallel: {dp: 2}\n"
                         << "train: {steps: 8, micro_batch: 2, global_batch: 4, lr: 2e-3, schedule: constant}\n"
                         << "checkpoint: {every_steps: 4, keep: 2}\n";
  }

  void TearDown() override {
    hosts_.reset();  // Every daemon and rank stopped before the file systems they used go.
    if (!mounted_.empty()) testing::RunCommand({"umount", "-l", mounted_});
  }

  // The coordinator on host 0 (again after a Kill: the same database, the same address).
  void StartCoordinator() {
    std::vector<std::string> argv = {testing::Runfile("coordinator/tessera-coordinator"), "--listen=" + coordinator_,
                                     "--db=" + dir_ + "/coord.db", "--heartbeat_timeout_s=5",
                                     "--metrics_listen=" + hosts_->address(0) + ":9464"};
    for (const std::string& f : certs_->CoordinatorFlags()) argv.push_back(f);
    for (const std::string& f : testing::ClusterCerts::RootFlags(dir_)) argv.push_back(f);
    auto c = hosts_->Spawn(0, argv, dir_ + "/coordinator.log");
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_pid_ = *c;
    ASSERT_TRUE(WaitFor([&] { return Cli({"jobs"}).exit_code == 0; }, 20)) << Log("coordinator.log");
  }

  // A worker on `host` (no --host: it must find its own address towards the coordinator). Its ranks'
  // collectives time out after 4 s, below the coordinator's 5 s heartbeat timeout.
  void StartWorker(int host, const std::string& devices, std::string name = "") {
    if (name.empty()) name = absl::StrCat("node", host);
    std::vector<std::string> argv = {testing::Runfile("worker/tessera-worker"), "--coordinator=" + coordinator_,
                                     "--devices=" + devices, "--work_dir=" + absl::StrCat(dir_, "/", name, ".", host),
                                     "--name=" + name, "--stop_grace_s=3", "--threads_per_rank=1",
                                     "--collective_timeout_s=4", "--metrics_listen=" + hosts_->address(host) + ":9465"};
    for (const std::string& f : certs_->WorkerFlags(name)) argv.push_back(f);
    for (const std::string& f : testing::ClusterCerts::RootFlags(dir_)) argv.push_back(f);
    auto w = hosts_->Spawn(host, argv, absl::StrCat(dir_, "/", name, ".", host, ".log"),
                           {{"TESSERA_RANK_BINARY", testing::Runfile("worker/rank/tessera-rank")}});
    ASSERT_TRUE(w.ok()) << w.status();
    worker_pids_[host] = *w;
  }

  testing::CliResult Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {testing::Runfile("client/tessera"), "--coordinator=" + coordinator_};
    for (const std::string& f : certs_->CliFlags(testing::ClusterCerts::UserOf(dir_))) argv.push_back(f);
    argv.insert(argv.end(), args.begin(), args.end());
    return hosts_->Run(0, argv);
  }

  void StartTwoWorkers() {
    StartWorker(1, "cpu:1");
    StartWorker(2, "cpu:1");
    ASSERT_TRUE(WaitFor([&] {
      const std::string out = Cli({"workers"}).output;
      return out.find("node1") != std::string::npos && out.find("node2") != std::string::npos;
    }, 20)) << Cli({"workers"}).output;
  }

  static bool Ended(const nlohmann::json& job) {
    const std::string s = job.value("state", "");
    return s == "JOB_STATE_SUCCEEDED" || s == "JOB_STATE_FAILED" || s == "JOB_STATE_CANCELLED";
  }

  nlohmann::json Job(const std::string& id) {
    auto j = nlohmann::json::parse(Cli({"--output=json", "job", id}).output, nullptr, false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  }

  // Every step's loss of `out` within fp32 tolerance of the single-process run of the spec with `sets`.
  void ExpectLossesOfTheSingleProcessRun(const std::string& out, const std::vector<std::string>& sets, int steps) {
    std::vector<std::string> args = {"run", spec_, "--quiet", "--threads-per-rank=1", "--set", "parallel.dp=1",
                                     "--set", "output_dir=" + dir_ + "/ref"};
    for (const std::string& s : sets) args.push_back("--set"), args.push_back(s);
    auto ref = testing::RunTessera(args);
    ASSERT_EQ(ref.exit_code, 0) << ref.output;
    const testing::Tolerances tol;  // fp32: loss atol 1e-5 / rtol 1e-3.
    const auto want = testing::ReadLosses(dir_ + "/ref/steps.jsonl");
    const auto got = testing::ReadLosses(out + "/steps.jsonl");
    ASSERT_EQ(want.size(), static_cast<size_t>(steps));
    ASSERT_EQ(got.size(), static_cast<size_t>(steps));
    for (const auto& [step, loss] : want) {
      EXPECT_NEAR(got.at(step), loss, tol.loss_atol + tol.loss_rtol * std::abs(loss)) << "loss of step " << step;
    }
  }

  // Submits the spec as job-000001 with kLongJob's settings (and `sets`) and three restarts allowed,
  // across the two workers, and waits for its checkpoint of step 20. Returns its output directory.
  std::string StartLongJob(const std::vector<std::string>& sets = {}) {
    const std::string out = dir_ + "/out";
    std::vector<std::string> submit = {"submit", spec_, "--max-restarts=3", "--set", "output_dir=" + out};
    for (const std::string& s : kLongJob) submit.push_back("--set"), submit.push_back(s);
    for (const std::string& s : sets) submit.push_back("--set"), submit.push_back(s);
    EXPECT_EQ(Cli(submit).exit_code, 0);
    EXPECT_TRUE(WaitFor([&] { return fs::exists(out + "/checkpoints/step_00000020"); }, 60))
        << Job("job-000001").dump();
    return out;
  }
  static inline const std::vector<std::string> kLongJob = {"train.steps=200", "checkpoint.every_steps=20"};

  // Each restart of `job` recomputed at most `allowed` steps: the steps earlier attempts had logged
  // past the checkpoint it resumed from (its history's recomputed_steps, measured by rank 0 as it
  // trims the step log). At least one later attempt trained. And `tessera jobs` still lists the job.
  // int64 fields are JSON strings.
  void ExpectRecomputedAtMost(const nlohmann::json& job, int64_t allowed) {
    EXPECT_THAT(Cli({"jobs"}).output, HasSubstr(job.value("id", "?"))) << "tessera jobs lists the job";
    auto num = [](const nlohmann::json& a, const char* key) -> int64_t {
      if (!a.contains(key)) return 0;  // Proto JSON leaves zeros out.
      return a[key].is_string() ? std::stoll(a[key].get<std::string>()) : a[key].get<int64_t>();
    };
    const nlohmann::json& h = job["history"];
    ASSERT_GE(h.size(), 2u) << job.dump();
    int trained = 0;
    for (size_t i = 1; i < h.size(); ++i) {
      if (num(h[i], "last_step") == 0) continue;  // Failed before its first step.
      ++trained;
      EXPECT_LE(num(h[i], "recomputed_steps"), allowed) << "attempt " << i + 1 << ": " << h.dump();
    }
    EXPECT_GE(trained, 1) << h.dump();
  }

  // A process's command line, arguments separated by NUL ("" once it is gone).
  static std::string Cmdline(pid_t pid) {
    std::ifstream cmd(absl::StrCat("/proc/", pid, "/cmdline"));
    return std::string((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  }

  // tessera-rank processes of this test, on any host (one process table: the hosts share the kernel).
  std::vector<pid_t> RankPids() {
    std::vector<pid_t> pids;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string s = Cmdline(std::atoi(e.path().filename().c_str()));
      if (s.find("tessera-rank") != std::string::npos && s.find(dir_ + "/") != std::string::npos) {
        pids.push_back(std::atoi(e.path().filename().c_str()));
      }
    }
    return pids;
  }
  int RanksLeft() { return static_cast<int>(RankPids().size()); }

  // Each live rank process of this test: pid and command line.
  std::string RankCommands() {
    std::string out;
    for (pid_t pid : RankPids()) {
      std::string s = Cmdline(pid);
      std::replace(s.begin(), s.end(), '\0', ' ');
      absl::StrAppend(&out, "\n  ", pid, ": ", s);
    }
    return out;
  }

  // The attempts of job-000001 that have a live rank process now (their job.json is under
  // WORK_DIR/jobs/job-000001/attempt_N/).
  std::set<int> AttemptsAlive() {
    std::set<int> attempts;
    for (pid_t pid : RankPids()) {
      const std::string s = Cmdline(pid);
      const size_t at = s.find("/jobs/job-000001/attempt_");
      if (at != std::string::npos) attempts.insert(std::atoi(s.c_str() + at + 25));
    }
    return attempts;
  }

  std::string Log(const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  // Every rank log of the job in `out`, all attempts.
  static std::string RankLogs(const std::string& out) {
    std::string logs;
    for (int rank : {0, 1}) {
      std::ifstream in(absl::StrCat(out, "/logs/rank_", rank, ".log"));
      logs += std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    return logs;
  }

  std::unique_ptr<testing::TestHosts> hosts_;
  std::unique_ptr<testing::ClusterCerts> certs_;
  std::string dir_, coordinator_, data_, spec_;
  pid_t coordinator_pid_ = -1;
  std::map<int, pid_t> worker_pids_;  // By host.
  std::string mounted_;               // A file system the test mounted (unmounted in TearDown).
};

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
  std::this_thread::sleep_for(std::chrono::seconds(6));  // Past the 5 s heartbeat timeout: node2 is lost.
  EXPECT_THAT(Cli({"workers"}).output, HasSubstr("LOST"));
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
  EXPECT_TRUE(parallel::VerifyCheckpoint(out + "/checkpoints/step_00000020").ok());
  EXPECT_FALSE(fs::exists(out + "/checkpoints/step_00000040"));

  auto grow = testing::RunCommand({"mount", "-o", "remount,size=64m", out});
  ASSERT_EQ(grow.exit_code, 0) << grow.output;
  ASSERT_TRUE(WaitFor([&] { return Ended(Job(id)); }, 120)) << "job stuck: " << Job(id).dump();
  EXPECT_EQ(Job(id).value("state", ""), "JOB_STATE_SUCCEEDED") << Job(id).dump();
  ExpectRecomputedAtMost(Job(id), 20);  // From step 40, whose checkpoint failed, back to 20.
  ExpectLossesOfTheSingleProcessRun(out, {"train.steps=200", "checkpoint.every_steps=20", "parallel.zero_stage=1"}, 200);
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
  // With a rank gone no checkpoint can be committed any more (every rank must vote): damage the
  // newest one now.
  auto all = parallel::ListCheckpoints(out + "/checkpoints");
  ASSERT_FALSE(all.empty());
  const int64_t damaged_step = all.back().first;
  fs::resize_file(all.back().second + "/model.safetensors", 1000);
  hosts_->Kill(coordinator_pid_);
  std::this_thread::sleep_for(std::chrono::seconds(1));
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
  EXPECT_THAT(RankLogs(out), HasSubstr(absl::StrCat(parallel::CheckpointName(damaged_step),
                                                    " is damaged: model.safetensors has 1000 bytes")));
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
