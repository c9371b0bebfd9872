// The fixture of the multi-host tests: a cluster of several hosts, tessera-coordinator and
// tessera-worker daemons each in a network namespace of its own (tests/testing/test_hosts.h,
// addresses 198.18.0.x, no default route), the real CLI, real rank processes; the filesystem is
// shared, as a cluster's storage would be. Skips with the reason where namespaces cannot be made
// (not root, no iproute2).
#ifndef TESSERA_TESTS_MULTI_HOST_FIXTURE_H_
#define TESSERA_TESTS_MULTI_HOST_FIXTURE_H_

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cli.h"
#include "tests/testing/process_table.h"
#include "tests/testing/cluster_certs.h"
#include "tests/testing/compare.h"
#include "tests/testing/test_hosts.h"

namespace tessera {

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
                         << "checkpoint: {every_steps: 4, keep: 2" << testing::CheckpointAsyncYaml() << "}\n";
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
    ASSERT_TRUE(testing::WaitFor([&] { return Cli({"jobs"}).exit_code == 0; }, 20)) << Log("coordinator.log");
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
    ASSERT_TRUE(testing::WaitFor([&] {
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
    EXPECT_TRUE(testing::WaitFor([&] { return std::filesystem::exists(out + "/checkpoints/step_00000020"); }, 60))
        << Job("job-000001").dump();
    return out;
  }
  static inline const std::vector<std::string> kLongJob = {"train.steps=200", "checkpoint.every_steps=20"};

  // Each restart of `job` recomputed at most `allowed` steps: the steps earlier attempts had logged
  // past the checkpoint it resumed from (its history's recomputed_steps, measured by rank 0 as it
  // trims the step log). At least one later attempt trained. And `tessera jobs` still lists the job.
  // int64 fields are JSON strings.
  void ExpectRecomputedAtMost(const nlohmann::json& job, int64_t allowed) {
    EXPECT_THAT(Cli({"jobs"}).output, ::testing::HasSubstr(job.value("id", "?"))) << "tessera jobs lists the job";
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
  static std::string Cmdline(pid_t pid) { return testing::Cmdline(pid); }

  // tessera-rank processes of this test, on any host (one process table: the hosts share the kernel).
  std::vector<pid_t> RankPids() { return testing::ProcessesMatching({"tessera-rank", dir_ + "/"}); }
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

}  // namespace tessera

#endif  // TESSERA_TESTS_MULTI_HOST_FIXTURE_H_
