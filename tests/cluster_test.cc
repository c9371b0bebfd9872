// The control plane end to end: a real tessera-coordinator (SQLite file), two tessera-worker daemons
// with one CPU device each, the real CLI, real rank processes — all on 127.0.0.1 in temp dirs.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/net/free_port.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cli.h"
#include "tests/testing/process_table.h"
#include "tests/testing/local_cluster.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunTessera;
using testing::WaitFor;

// tessera-rank processes whose command line contains every needle (rank processes carry their
// worker's work dir and their job id in their --spec path).
std::vector<pid_t> ProcessesMatching(std::vector<std::string> needles) {
  needles.push_back("tessera-rank");
  return testing::ProcessesMatching(needles);
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDir(std::string("cluster_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    cluster_ = std::make_unique<testing::LocalCluster>(dir_);  // The cluster talks mutual TLS.
    StartCoordinator();
    for (const std::string name : {"a", "b"}) StartWorker(name);
    ASSERT_TRUE(cluster_->WaitAlive({"a", "b"})) << Cli({"workers"}).output;
    data_ = testing::WriteTokenFile(dir_, 40000);
    spec_ = dir_ + "/spec.yaml";
    std::ofstream(spec_) << "name: cluster\n"
                         << "model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32}\n"
                         << "data: {path: " << data_ << "}\n"
                         << "parallel: {dp: 2}\n"
                         << "train: {steps: 20, micro_batch: 2, global_batch: 4, lr: 2e-3, schedule: constant}\n"
                         << "checkpoint: {every_steps: 5, keep: 3" << testing::CheckpointAsyncYaml() << "}\n";
  }

  void TearDown() override {
    cluster_->Stop();
    EXPECT_TRUE(ProcessesMatching({dir_ + "/"}).empty()) << "no rank outlives its worker";
  }

  // Starts worker `name` (one CPU device); its pid goes to workers()[name].
  void StartWorker(const std::string& name) { ASSERT_TRUE(cluster_->StartWorker(name)); }
  void StartCoordinator() { ASSERT_TRUE(cluster_->StartCoordinator()) << "coordinator did not come up"; }
  testing::CliResult Cli(std::vector<std::string> args) { return cluster_->Cli(std::move(args)); }
  static bool Ended(const nlohmann::json& job) { return testing::LocalCluster::Ended(job); }
  nlohmann::json Job(const std::string& id) { return cluster_->Job(id); }
  std::map<std::string, pid_t>& workers() { return cluster_->workers(); }

  std::string Submit(std::vector<std::string> sets) {
    std::vector<std::string> args = {"--output=json", "submit", spec_};
    for (auto& s : sets) args.push_back("--set"), args.push_back(s);
    auto r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    return j.is_discarded() ? "" : j.value("id", "");
  }

  // Runs the undisturbed reference of `steps` steps (`tessera run`, into DIR/ref), submits the same
  // spec as job-000001 with two restarts allowed, and waits for its checkpoint of step 5. Returns the
  // job's output directory.
  std::string StartRestartableJob(int steps) {
    const std::string n = absl::StrCat("train.steps=", steps);
    auto ref = RunTessera({"run", spec_, "--quiet", "--threads-per-rank=1", "--set", n, "--set",
                           "output_dir=" + dir_ + "/ref"});
    EXPECT_EQ(ref.exit_code, 0) << ref.output;
    const std::string out = dir_ + "/out";
    auto r = Cli({"submit", spec_, "--max-restarts=2", "--set", n, "--set", "output_dir=" + out});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(WaitFor([&] { return fs::exists(out + "/checkpoints/step_00000005"); }, 60));
    return out;
  }

  // job-000001 ends SUCCEEDED after exactly one restart, with the reference's losses bit for bit (same
  // layout, same restored state and data position: the same arithmetic).
  void ExpectOneRestartAndUndisturbedLosses(const std::string& out, int steps) {
    ASSERT_TRUE(WaitFor([&] { return Ended(Job("job-000001")); }, 120)) << "job stuck: " << Job("job-000001").dump();
    auto job = Job("job-000001");
    EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED");
    EXPECT_EQ(job.value("attempt", 0), 2) << "one restart";
    const auto want = testing::ReadLosses(dir_ + "/ref/steps.jsonl");
    const auto got = testing::ReadLosses(out + "/steps.jsonl");
    ASSERT_EQ(got.size(), static_cast<size_t>(steps));
    for (const auto& [step, loss] : want) EXPECT_EQ(got.at(step), loss) << "step " << step;
  }

  std::unique_ptr<testing::LocalCluster> cluster_;
  std::string dir_, data_, spec_;
};

// What an operator reads: the coordinator's log tells the job's story (submitted, placed, running,
// ended) and every rank logs progress lines (train.log_every) besides its header.
TEST_F(ClusterTest, TheCoordinatorLogsEachTransitionAndRanksLogTheirProgress) {
  const std::string id = Submit({"train.steps=6", "train.log_every=2", "output_dir=" + dir_ + "/story"});
  ASSERT_TRUE(WaitFor([&] { return Ended(Job(id)); }, 60)) << Job(id).dump();
  EXPECT_EQ(Job(id).value("state", ""), "JOB_STATE_SUCCEEDED");
  std::ifstream in(dir_ + "/coordinator.log");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const std::string& line : {"job " + id + " (cluster) submitted by ",
                                  "job " + id + " (cluster) PENDING -> SCHEDULED: attempt 1 placed: 2 ranks on 2 workers (a, b)",
                                  "job " + id + " (cluster) SCHEDULED -> RUNNING: attempt 1 running",
                                  "job " + id + " (cluster) RUNNING -> SUCCEEDED: all ranks finished (attempt 1)"}) {
    EXPECT_THAT(log, HasSubstr(line)) << log;
  }
  for (const char* rank : {"0", "1"}) {
    const std::string ranks = Cli({"logs", id, "--rank", rank}).output;
    for (int step : {2, 4, 6}) {
      EXPECT_THAT(ranks, HasSubstr(absl::StrCat("tessera: rank ", rank, ": step ", step, "/6 loss "))) << ranks;
    }
    EXPECT_THAT(ranks, Not(HasSubstr(absl::StrCat("tessera: rank ", rank, ": step 3/6")))) << ranks;
  }
}

TEST_F(ClusterTest, SubmittedJobSucceedsAndLearns) {
  // With a held-out tail evaluated after steps 10 and 20: val_loss reaches the job's progress.
  auto r = Cli({"submit", spec_, "--follow", "--set", "output_dir=" + dir_ + "/out", "--set", "data.valid_fraction=0.05",
                "--set", "train.eval_every=10", "--set", "train.eval_batches=2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("SUCCEEDED"));
  auto jobs = Cli({"jobs"});
  EXPECT_THAT(jobs.output, HasSubstr("SUCCEEDED"));
  EXPECT_THAT(jobs.output, HasSubstr("VAL LOSS"));
  auto job = Job("job-000001");
  ASSERT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED");
  const auto& p = job["progress"];
  EXPECT_EQ(p.value("step", std::string()), "20");  // int64 travels as a JSON string.
  EXPECT_LT(p.value("loss", 0.0), p.value("first_loss", 0.0)) << "the loss fell";
  EXPECT_EQ(testing::ReadLosses(dir_ + "/out/steps.jsonl").size(), 20u);
  const auto val = testing::ReadValLosses(dir_ + "/out/steps.jsonl");
  ASSERT_EQ(val.size(), 2u);
  EXPECT_EQ(p.value("val_step", std::string()), "20");
  EXPECT_EQ(p.value("val_loss", 0.0), val.at(20)) << "the step log's value, unchanged";
  EXPECT_LT(val.at(20), val.at(10)) << "the validation loss fell too";
  EXPECT_THAT(Cli({"job", "job-000001"}).output, HasSubstr(absl::StrFormat("val_loss %.4f (step 20)", val.at(20))));
  EXPECT_EQ(p.value("last_checkpoint_step", std::string()), "20");
  auto logs = Cli({"logs", "job-000001", "--rank", "1"});
  EXPECT_EQ(logs.exit_code, 0);
  EXPECT_THAT(logs.output, HasSubstr("=== tessera-worker: job job-000001 attempt 1 rank 1 ==="));
  EXPECT_EQ(Cli({"logs", "job-000001", "--rank", "7"}).exit_code, 2);
}

TEST_F(ClusterTest, PlanShowsMeshAndPlacementWithoutRunning) {
  auto r = Cli({"plan", spec_});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("mesh: dp 2 × pp 1 × tp 1 × sp 1 = 2 ranks, order tp-sp-pp-dp"));
  EXPECT_THAT(r.output, HasSubstr("RANK  WORKER"));
  auto big = Cli({"plan", spec_, "--set", "parallel.dp=4", "--set", "train.global_batch=8"});
  EXPECT_THAT(big.output, HasSubstr("not placeable now: needs 4 devices; 2 free on 2 workers"));
  EXPECT_THAT(Cli({"jobs"}).output, ::testing::Not(HasSubstr("job-")));
}

TEST_F(ClusterTest, CancelStopsEveryRankWithinTheGracePeriod) {
  const std::string id = Submit({"train.steps=100000", "output_dir=" + dir_ + "/out"});
  ASSERT_TRUE(WaitFor([&] { return Job(id).value("state", "") == "JOB_STATE_RUNNING"; }, 30));
  // STARTED is reported when the worker has forked a rank; its command line is the rank's once it execs.
  ASSERT_TRUE(WaitFor([&] { return ProcessesMatching({dir_ + "/", "/jobs/" + id + "/"}).size() == 2u; }, 5));
  auto r = Cli({"cancel", id});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("CANCELLED"));
  EXPECT_TRUE(WaitFor([&] { return ProcessesMatching({dir_ + "/", "/jobs/" + id + "/"}).empty(); }, 3 + 2))
      << "ranks gone within the 3 s grace period (+2 s of polling)";
  EXPECT_TRUE(WaitFor([&] {
    auto w = nlohmann::json::parse(Cli({"--output=json", "workers"}).output, nullptr, false);
    if (w.is_discarded()) return false;
    for (const auto& x : w["workers"]) {
      if (x.value("devices_in_use", 0) != 0) return false;
    }
    return true;
  }, 5)) << "devices are free again";
}

TEST_F(ClusterTest, JobLargerThanTheClusterWaitsWithItsReason) {
  const std::string id = Submit({"parallel.dp=4", "train.global_batch=8", "output_dir=" + dir_ + "/out"});
  auto job = Job(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_PENDING");
  EXPECT_THAT(job.value("reason", ""), HasSubstr("needs 4 cpu devices, more than the whole cluster's 2"));
  auto r = Cli({"job", id});
  EXPECT_THAT(r.output, HasSubstr("needs 4 cpu devices"));
  // Following a job that does not end gives up at --timeout (before: no overall timeout).
  const auto start = std::chrono::steady_clock::now();
  auto followed = Cli({"follow", id, "--timeout", "2"});
  EXPECT_EQ(followed.exit_code, 4) << followed.output;
  EXPECT_THAT(followed.output, HasSubstr("stopped following " + id + " after --timeout 2s (it is PENDING)"));
  auto logs = Cli({"logs", id, "--follow", "--timeout", "1"});
  EXPECT_EQ(logs.exit_code, 4) << logs.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
  EXPECT_EQ(Cli({"cancel", id}).exit_code, 0);
}

TEST_F(ClusterTest, KilledRankRestartsFromCheckpointWithUndisturbedLosses) {
  const std::string out = StartRestartableJob(60);
  auto ranks = ProcessesMatching({dir_ + "/", "/jobs/job-000001/attempt_1/"});
  ASSERT_FALSE(ranks.empty());
  kill(ranks.back(), SIGKILL);
  ExpectOneRestartAndUndisturbedLosses(out, 60);
}

TEST_F(ClusterTest, WorkerRestartedWithinTheHeartbeatTimeoutRestartsItsJob) {
  // As systemd's Restart= does: the worker dies (its rank with it) and is back before the coordinator's
  // 5 s heartbeat timeout could call it lost. Its registration reports no rank of the running attempt.
  const std::string out = StartRestartableJob(40);
  ASSERT_EQ(Job("job-000001").value("attempt", 0), 1);
  kill(workers()["b"], SIGKILL);
  int status = 0;
  waitpid(workers()["b"], &status, 0);
  const auto killed = std::chrono::steady_clock::now();
  StartWorker("b");
  // The attempt fails at the re-registration, not after a collective timeout (300 s) of the other rank.
  ASSERT_TRUE(WaitFor([&] { return Job("job-000001").value("attempt", 0) == 2; }, 15)) << Job("job-000001").dump();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count(), 15.0);
  ExpectOneRestartAndUndisturbedLosses(out, 40);
  EXPECT_TRUE(ProcessesMatching({dir_ + "/", "/jobs/job-000001/attempt_1/"}).empty()) << "no rank of attempt 1 left";
}

TEST_F(ClusterTest, CoordinatorKilledMidJobLosesNothing) {
  const std::string first = Submit({"train.steps=5", "output_dir=" + dir_ + "/first"});
  ASSERT_TRUE(WaitFor([&] { return Job(first).value("state", "") == "JOB_STATE_SUCCEEDED"; }, 60));
  const std::string out = dir_ + "/out";
  const std::string id = Submit({"train.steps=400", "output_dir=" + out});
  ASSERT_TRUE(WaitFor([&] { return fs::exists(out + "/checkpoints/step_00000005"); }, 60));
  kill(cluster_->coordinator(), SIGKILL);
  waitpid(cluster_->coordinator(), nullptr, 0);
  cluster_->coordinator() = -1;
  StartCoordinator();
  auto jobs = Cli({"jobs"});
  EXPECT_THAT(jobs.output, HasSubstr(first));
  EXPECT_THAT(jobs.output, HasSubstr(id));
  auto done = Cli({"follow", id});
  EXPECT_EQ(done.exit_code, 0) << done.output;
  EXPECT_EQ(Job(id).value("state", ""), "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(Job(id).value("attempt", 0), 1) << "the running ranks carried on; nothing restarted: " << Job(id).dump();
  EXPECT_EQ(Job(first).value("state", ""), "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(testing::ReadLosses(out + "/steps.jsonl").size(), 400u);
}

TEST_F(ClusterTest, LostWorkerFailsTheAttemptAndTheJobResumesWhenItReturns) {
  const std::string out = dir_ + "/out";
  auto r = Cli({"submit", spec_, "--max-restarts=1", "--set", "train.steps=300", "--set", "output_dir=" + out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(WaitFor([&] { return fs::exists(out + "/checkpoints/step_00000005"); }, 60));
  // The node dies: the worker and (through their parent-death signal) its ranks.
  kill(workers()["b"], SIGKILL);
  waitpid(workers()["b"], nullptr, 0);
  workers().erase("b");
  ASSERT_TRUE(WaitFor([&] { return Job("job-000001").value("state", "") == "JOB_STATE_PENDING"; }, 20))
      << Job("job-000001").dump();
  // Whichever is noticed first — the surviving rank's broken all-reduce or b's missing heartbeats —
  // fails the attempt; then the job waits for a second device.
  // (Before b counts as lost the reason is "needs 2 devices; 1 free"; once it is, b's fence — its
  // ranks may only be cut off, not dead — and after that "more than the whole cluster's 1".)
  EXPECT_THAT(Job("job-000001").value("reason", ""),
              ::testing::AnyOf(HasSubstr("waiting for devices: needs 2 devices; 1 free"),
                               HasSubstr("waiting until lost worker b has surely stopped the ranks of attempt 1"),
                               HasSubstr("needs 2 cpu devices, more than the whole cluster's 1")));
  EXPECT_TRUE(WaitFor([&] { return Cli({"workers"}).output.find("LOST") != std::string::npos; }, 10))
      << "b is lost after 5 s without heartbeats";
  StartWorker("b");  // The node comes back under the same name.
  auto done = Cli({"follow", "job-000001"});
  EXPECT_EQ(done.exit_code, 0) << done.output;
  auto job = Job("job-000001");
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(job.value("attempt", 0), 2);
  EXPECT_EQ(testing::ReadLosses(out + "/steps.jsonl").size(), 300u);
}

TEST_F(ClusterTest, MalformedRequestsAreInvalidArgumentAndTheCoordinatorKeepsServing) {
  auto bad = Cli({"submit", spec_, "--set", "parallel.tp=3"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.output, HasSubstr("parallel.tp: 3 does not divide model.heads 4"));
  auto missing = Cli({"job", "job-999999"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.output, HasSubstr("job job-999999 does not exist"));
  auto unreachable = RunTessera({"--coordinator=127.0.0.1:1", "jobs"});
  EXPECT_EQ(unreachable.exit_code, 3);
  EXPECT_THAT(unreachable.output, HasSubstr("cannot reach the coordinator at 127.0.0.1:1"));
  EXPECT_EQ(Cli({"jobs"}).exit_code, 0);
}

std::string HttpGet(const std::string& url) {
  FILE* p = popen(("curl -s --max-time 5 '" + url + "'").c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// The value of the first sample a PromQL query returns, or -1.
double PromQuery(const std::string& prometheus, const std::string& query) {
  std::string encoded;
  for (char c : query) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      encoded += c;
    } else {
      char hex[4];
      snprintf(hex, sizeof(hex), "%%%02X", static_cast<unsigned char>(c));
      encoded += hex;
    }
  }
  auto j = nlohmann::json::parse(HttpGet("http://" + prometheus + "/api/v1/query?query=" + encoded), nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success" || j["data"]["result"].empty()) return -1;
  return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
}

// Worker pools with real daemons: the workers started with --pool alpha / beta run only their pools'
// jobs (a and b, started without --pool, are the default pool); a job for a pool without workers
// waits, its reason naming the pool; `tessera workers` shows pools and labels.
TEST_F(ClusterTest, JobsRunOnlyOnTheirPoolsWorkers) {
  ASSERT_TRUE(cluster_->StartWorker("p1", 1, {"--pool=alpha", "--labels=rack=r1,zone=z"}));
  ASSERT_TRUE(cluster_->StartWorker("p2", 1, {"--pool=beta"}));
  ASSERT_TRUE(cluster_->WaitAlive({"a", "b", "p1", "p2"})) << Cli({"workers"}).output;
  const std::string listed = Cli({"workers"}).output;
  EXPECT_THAT(listed, HasSubstr("POOL"));
  EXPECT_THAT(listed, HasSubstr("alpha"));
  EXPECT_THAT(listed, HasSubstr("rack=r1,zone=z"));
  const std::string gamma = Submit({"placement.pool=gamma", "parallel.dp=1", "train.global_batch=2",
                                    "output_dir=" + dir_ + "/gamma"});
  const std::string alpha = Submit({"placement.pool=alpha", "parallel.dp=1", "train.global_batch=2", "train.steps=3",
                                    "output_dir=" + dir_ + "/alpha"});
  const std::string beta = Submit({"placement.pool=beta", "parallel.dp=1", "train.global_batch=2", "train.steps=3",
                                   "output_dir=" + dir_ + "/beta"});
  for (const auto& [id, worker] : {std::pair{alpha, "p1"}, std::pair{beta, "p2"}}) {
    ASSERT_TRUE(WaitFor([&] { return Ended(Job(id)); }, 60)) << Job(id).dump();
    const nlohmann::json job = Job(id);
    EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
    ASSERT_EQ(job["history"].size(), 1u) << job.dump();
    EXPECT_EQ(job["history"][0]["workers"], nlohmann::json::array({worker})) << job.dump();
  }
  const nlohmann::json waiting = Job(gamma);
  EXPECT_EQ(waiting.value("state", ""), "JOB_STATE_PENDING");
  EXPECT_THAT(waiting.value("reason", ""), HasSubstr("no live worker is in pool 'gamma'"));
  EXPECT_EQ(Cli({"cancel", gamma}).exit_code, 0);
}

TEST_F(ClusterTest, PrometheusScrapesCoordinatorAndWorkersDuringAJob) {
  // Metrics addresses: the coordinator prints its own; workers report theirs at registration.
  std::string coord_metrics;
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream log(dir_ + "/coordinator.log");
    std::string line;
    while (std::getline(log, line)) {
      auto at = line.find("metrics on http://");
      if (at != std::string::npos) coord_metrics = line.substr(at + 18, line.find("/metrics") - at - 18);
    }
    return !coord_metrics.empty();
  }, 10));
  auto workers = nlohmann::json::parse(Cli({"--output=json", "workers"}).output, nullptr, false);
  ASSERT_FALSE(workers.is_discarded());
  std::vector<std::string> targets = {coord_metrics};
  for (const auto& w : workers["workers"]) targets.push_back(w.value("metrics_address", ""));
  ASSERT_EQ(targets.size(), 3u);
  const int prom_port = net::PickFreePort();
  const std::string prom = absl::StrCat("127.0.0.1:", prom_port);
  std::ofstream(dir_ + "/prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                          << "scrape_configs:\n  - job_name: tessera\n    static_configs:\n"
                                          << "      - targets: ['" << targets[0] << "', '" << targets[1] << "', '"
                                          << targets[2] << "']\n";
  process::SpawnOptions so;
  so.argv = {"/usr/bin/prometheus", "--config.file=" + dir_ + "/prometheus.yml", "--web.listen-address=" + prom,
             "--storage.tsdb.path=" + dir_ + "/tsdb"};
  so.log_path = dir_ + "/prometheus.log";
  auto pid = process::Spawn(so);
  ASSERT_TRUE(pid.ok());
  const std::string id = Submit({"train.steps=100000", "output_dir=" + dir_ + "/out", "data.valid_fraction=0.05",
                                  "train.eval_every=2", "train.eval_batches=1", "checkpoint.async=true",
                                  "checkpoint.every_steps=2"});
  // What Prometheus saw, for a failure's message: the job as the coordinator has it and the targets'
  // health (a failure once showed every series missing after 120 s, with nothing to tell why).
  auto observed = [&] {
    return absl::StrCat("job ", Job(id).dump(), "\nPrometheus targets ",
                        HttpGet("http://" + prom + "/api/v1/targets?state=active").substr(0, 4000));
  };
  // The job runs and reports steps to the coordinator before Prometheus can see its series: with the
  // rest of the suite on the same two cores its first step can take long, so the generous wait is
  // here, on the coordinator, and the scrapes below only wait for a few scrape intervals.
  ASSERT_TRUE(WaitFor([&] {
    const nlohmann::json job = Job(id);
    int64_t step = 0;
    if (job.contains("progress") && job["progress"].is_object()) {
      step = std::atoll(job["progress"].value("step", std::string("0")).c_str());
    }
    return job.value("state", "") == "JOB_STATE_RUNNING" && step >= 2;
  }, 180)) << observed();
  double tokens_per_s = -1;
  WaitFor([&] {
    tokens_per_s = PromQuery(prom, "tessera_worker_tokens_per_second{job_id=\"" + id + "\",rank=\"0\"}");
    return tokens_per_s > 0;
  }, 60);
  EXPECT_GT(tokens_per_s, 0) << "PromQL for the job's tokens/s\n" << observed();
  // Each target is scraped once a second; give every series a few scrapes to appear.
  EXPECT_TRUE(WaitFor([&] { return PromQuery(prom, "tessera_coordinator_jobs{state=\"running\"}") >= 1; }, 20))
      << observed();
  EXPECT_TRUE(WaitFor([&] { return PromQuery(prom, "count(tessera_build_info)") == 3; }, 10))
      << "coordinator and both workers scraped";
  EXPECT_TRUE(WaitFor([&] { return PromQuery(prom, "min(tessera_worker_process_resident_memory_bytes)") > 1e6; }, 20))
      << observed();
  // The validation loss beside the training loss (an untrained byte model starts near ln 256 = 5.5).
  double val = -1;
  WaitFor([&] { return (val = PromQuery(prom, "tessera_worker_val_loss{job_id=\"" + id + "\",rank=\"0\"}")) > 0; }, 40);
  EXPECT_GT(val, 0.5) << "PromQL for the job's val_loss\n" << observed();
  EXPECT_LT(val, 7.0);
  // Asynchronous checkpoints: the time each held its step and each background write's.
  const std::string series = "{job_id=\"" + id + "\",rank=\"0\"}";
  EXPECT_TRUE(WaitFor([&] { return PromQuery(prom, "tessera_worker_checkpoint_blocked_seconds_count" + series) >= 1; }, 40))
      << observed();
  EXPECT_TRUE(WaitFor([&] { return PromQuery(prom, "tessera_worker_checkpoint_write_seconds_count" + series) >= 1; }, 40))
      << observed();
  // Most heartbeats repeat the worker's previous one: the coordinator applies them without its lock.
  EXPECT_TRUE(WaitFor(
      [&] { return PromQuery(prom, "sum(tessera_coordinator_rpc_duration_seconds_count{method=\"Heartbeat\"})") > 0; },
      10));
  EXPECT_TRUE(WaitFor([&] { return PromQuery(prom, "tessera_coordinator_heartbeats_total{path=\"fast\"}") > 0; }, 10));
  EXPECT_EQ(Cli({"cancel", id}).exit_code, 0);
  process::StopAll({*pid}, std::chrono::seconds(5));
}

}  // namespace
}  // namespace tessera
