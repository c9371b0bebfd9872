// The rank order a spec names, honoured end to end: a real coordinator and two real workers with two
// CPU devices each (127.0.0.1), jobs of four ranks in several `parallel.order`s. Each job's tensor
// parallel groups must sit on one worker (placement takes them from the layout's rank generator), and
// its training must equal the single-process run of the same model, init and data.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cli.h"
#include "tests/testing/compare.h"
#include "tests/testing/local_cluster.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kSteps = 6;

struct Case {
  std::string name;
  std::vector<std::string> sets;
  // The tp groups by rank arithmetic (rank = Σ coordinate·stride, strides in the order's sequence).
  std::vector<std::vector<int>> tp_groups;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ClusterLayoutTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::FreshDir("cluster_layout"));
    cluster_ = new testing::LocalCluster(*dir_);
    ASSERT_TRUE(cluster_->StartCoordinator()) << "coordinator did not come up";
    for (const std::string name : {"a", "b"}) ASSERT_TRUE(cluster_->StartWorker(name, /*devices=*/2));
    ASSERT_TRUE(cluster_->WaitAlive({"a", "b"})) << cluster_->Cli({"workers"}).output;
    spec_ = new std::string(*dir_ + "/spec.yaml");
    std::ofstream(*spec_) << "name: layout\n"
                          << "model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32}\n"
                          << "data: {path: " << testing::WriteTokenFile(*dir_, 40000) << ", valid_fraction: 0.05}\n"
                          << "train: {steps: " << kSteps << ", micro_batch: 2, global_batch: 4, lr: 1e-3,"
                          << " warmup_steps: 2, schedule: cosine, min_lr: 1e-4, eval_every: 3, eval_batches: 2}\n"
                          << "checkpoint: {every_steps: 1, keep: 10}\n";
    // The single-process reference (tessera run, one rank).
    auto ref = testing::RunTessera({"run", *spec_, "--quiet", "--threads-per-rank=1", "--set",
                                    "output_dir=" + *dir_ + "/ref"});
    ASSERT_EQ(ref.exit_code, 0) << ref.output;
  }
  static void TearDownTestSuite() {
    cluster_->Stop();
    delete cluster_;
  }

  static std::string* dir_;
  static std::string* spec_;
  static testing::LocalCluster* cluster_;
};
std::string* ClusterLayoutTest::dir_ = nullptr;
std::string* ClusterLayoutTest::spec_ = nullptr;
testing::LocalCluster* ClusterLayoutTest::cluster_ = nullptr;

// The weights of a run's checkpoint of step 1, as `tessera export` writes them (full tensors).
std::map<std::string, std::vector<float>> ExportedWeights(const std::string& run_dir, const std::string& out) {
  auto r = testing::RunTessera({"export", run_dir + "/checkpoints/step_00000001", out});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return testing::ReadF32(out + "/model.safetensors");
}

TEST_P(ClusterLayoutTest, TensorGroupsStayOnOneWorkerAndTheJobEqualsOneProcess) {
  const Case& c = GetParam();
  ASSERT_NE(cluster_, nullptr);
  const std::string out = *dir_ + "/" + c.name;
  std::vector<std::string> args = {"submit", *spec_, "--follow", "--set", "output_dir=" + out};
  for (const std::string& s : c.sets) args.push_back("--set"), args.push_back(s);
  auto r = cluster_->Cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Which job: the newest of this test's submissions.
  const nlohmann::json jobs = nlohmann::json::parse(cluster_->Cli({"--output=json", "jobs"}).output, nullptr, false);
  ASSERT_FALSE(jobs.is_discarded());
  std::string id;
  for (const auto& j : jobs["jobs"]) {
    if (j["spec"].value("output_dir", "") == out) id = j.value("id", "");
  }
  ASSERT_FALSE(id.empty()) << jobs.dump();
  const nlohmann::json job = cluster_->Job(id);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  std::map<int, std::string> worker_of;
  for (const auto& p : job["placement"]) worker_of[p.value("rank", 0)] = p.value("worker_id", "");
  ASSERT_EQ(worker_of.size(), 4u) << job.dump();
  for (const auto& group : c.tp_groups) {
    std::set<std::string> workers;
    for (int rank : group) workers.insert(worker_of.at(rank));
    EXPECT_EQ(workers.size(), 1u) << "tp group {" << group[0] << "," << group[1] << "} spans workers";
  }
  EXPECT_THAT(job.value("placement_explanation", ""), HasSubstr("each on one worker"));
  EXPECT_THAT(cluster_->Cli({"job", id}).output, HasSubstr("placement: ranks numbered"));

  // Equal to one process: losses, validation losses and gradient norms of every step (fp32
  // tolerances, tests/testing/compare.h), and the weights after step 1 (weight_atol 1e-5, rtol 1e-4:
  // AdamW's first update is lr·g/(|g|+ε), so where |g| ≈ ε a gradient within its tolerance moves a
  // weight by up to ~lr; step 1's lr is 5e-4 here, as in parallel_equivalence_test).
  testing::ExpectStepLogsClose(*dir_ + "/ref", out, kSteps);
  const auto want = ExportedWeights(*dir_ + "/ref", *dir_ + "/ref_export_" + c.name);
  const auto got = ExportedWeights(out, out + "_export");
  ASSERT_FALSE(want.empty());
  const testing::Tolerances tol;
  testing::ExpectTensorsClose(want, got, "", tol.weight_atol, tol.weight_rtol, static_cast<int>(want.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Orders, ClusterLayoutTest,
    ::testing::Values(
        // dp fastest: rank = dp + 2·tp, so the tp groups are {0,2} and {1,3} (the bug: they were split).
        Case{"dp2_tp2_dp_fastest", {"parallel.dp=2", "parallel.tp=2", "parallel.order=dp-tp-sp-pp"}, {{0, 2}, {1, 3}}},
        // The default tp-sp-pp-dp: rank = tp + 2·dp, groups {0,1} and {2,3}.
        Case{"dp2_tp2_default", {"parallel.dp=2", "parallel.tp=2"}, {{0, 1}, {2, 3}}},
        // pp outermost, tp next: rank = tp + 2·pp, groups {0,1} and {2,3}.
        Case{"pp2_tp2_pp_outermost", {"parallel.pp=2", "parallel.tp=2", "parallel.order=dp-sp-tp-pp"}, {{0, 1}, {2, 3}}},
        // pp fastest: rank = pp + 2·tp, groups {0,2} and {1,3}; each pipeline spans the workers.
        Case{"pp2_tp2_pp_fastest", {"parallel.pp=2", "parallel.tp=2", "parallel.order=pp-tp-sp-dp"}, {{0, 2}, {1, 3}}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace tessera
