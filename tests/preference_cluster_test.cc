// Preference objectives (DPO, reward models) through the control plane, as any job: a real
// tessera-coordinator and two tessera-worker daemons (one CPU device each) on 127.0.0.1, the pairs
// prepared by the real CLI from the shipped examples, a job submitted and followed. Its step log
// (loss, gradient norm and every reward field) equals `tessera run`'s of the same spec bit for bit
// (same layout, same arithmetic), the coordinator's progress and TensorBoard carry it, and a DPO job
// whose rank is killed resumes from its checkpoint — the reference's log-probabilities restored, not
// recomputed from the trained weights — with the undisturbed run's numbers. A GRPO job, its rank killed
// (most of a GRPO step is sampling), resumes and samples what the undisturbed run sampled: the same
// rollouts.jsonl and step numbers.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "formats/tensorboard/event_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cli.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/process_table.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::RunTessera;
using testing::WaitFor;

// The numbers of a preference step line (timings and memory aside).
const std::vector<std::string> kDpoFields = {"loss", "grad_norm", "rewards_chosen", "rewards_rejected",
                                             "rewards_margin", "rewards_accuracy", "logps_chosen", "logps_rejected"};
const std::vector<std::string> kRewardFields = {"loss", "grad_norm", "rewards_chosen", "rewards_rejected",
                                                "rewards_margin", "rewards_accuracy"};

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class PreferenceClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDir(std::string("preference_") +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    // The SFT example's tokenizer (384 ids) and the DPO example's pairs, cut to 40 + 24 tokens below.
    pairs_ = dir_ + "/pairs";
    auto prepared = RunTessera({"data", "prepare", "--tokenizer", testing::Runfile("examples/sft"), "--preference",
                                testing::Runfile("examples/dpo/pairs.jsonl"), pairs_});
    ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
    cluster_ = std::make_unique<testing::LocalCluster>(dir_);
    ASSERT_TRUE(cluster_->StartCoordinator()) << "coordinator did not come up";
    for (const std::string name : {"a", "b"}) ASSERT_TRUE(cluster_->StartWorker(name));
    ASSERT_TRUE(cluster_->WaitAlive({"a", "b"})) << cluster_->Cli({"workers"}).output;
  }

  void TearDown() override {
    cluster_->Stop();
    EXPECT_TRUE(testing::ProcessesMatching({"tessera-rank", dir_ + "/"}).empty()) << "no rank outlives its worker";
  }

  // A spec of `objective` over the prepared pairs on dp=2 (one rank per worker), from the seed's weights.
  std::string WriteSpec(const std::string& objective, int steps) {
    const std::string path = dir_ + "/" + objective + ".yaml";
    std::ofstream(path) << "name: " << objective << "\n"
                        << "model: {family: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, "
                        << "vocab: 384, seq_len: 64}\n"
                        << "data: {path: " << pairs_ << ", max_prompt_tokens: 40, max_completion_tokens: 24}\n"
                        << "parallel: {dp: 2}\n"
                        << "train: {objective: " << objective << ", steps: " << steps
                        << ", micro_batch: 2, global_batch: 4, lr: 1e-3, schedule: constant}\n"
                        << "checkpoint: {every_steps: 5, keep: 2" << testing::CheckpointAsyncYaml() << "}\n";
    return path;
  }

  // `tessera run` of `spec` into DIR/ref-NAME: the undisturbed numbers.
  std::string RunLocally(const std::string& spec, const std::string& name) {
    const std::string out = dir_ + "/ref-" + name;
    auto r = RunTessera({"run", spec, "--quiet", "--threads-per-rank=1", "--set", "output_dir=" + out});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out;
  }

  // Every field of every step of `got`'s step log equals `want`'s, exactly.
  void ExpectSameSteps(const std::string& want, const std::string& got, const std::vector<std::string>& fields,
                       int steps) {
    for (const std::string& field : fields) {
      const auto w = testing::ReadStepField(want + "/steps.jsonl", field);
      const auto g = testing::ReadStepField(got + "/steps.jsonl", field);
      ASSERT_EQ(w.size(), static_cast<size_t>(steps)) << field;
      ASSERT_EQ(g.size(), static_cast<size_t>(steps)) << field;
      for (const auto& [step, value] : w) EXPECT_EQ(g.at(step), value) << field << " at step " << step;
    }
  }

  // Submits `spec` into DIR/out (two restarts allowed), SIGKILLs a rank of its first attempt once the
  // checkpoint of step 5 exists, and waits for the job to end: it succeeds on its second attempt.
  // Returns the output directory.
  std::string SubmitAndKillARank(const std::string& spec) {
    const std::string out = dir_ + "/out";
    auto r = cluster_->Cli({"submit", spec, "--max-restarts=2", "--set", "output_dir=" + out});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(WaitFor([&] { return fs::exists(out + "/checkpoints/step_00000005"); }, 120))
        << cluster_->Job("job-000001").dump();
    auto ranks = testing::ProcessesMatching({"tessera-rank", dir_ + "/", "/jobs/job-000001/attempt_1/"});
    EXPECT_FALSE(ranks.empty()) << "the job ended before its rank could be killed: " << cluster_->Job("job-000001").dump();
    if (!ranks.empty()) kill(ranks.back(), SIGKILL);
    EXPECT_TRUE(WaitFor([&] { return testing::LocalCluster::Ended(cluster_->Job("job-000001")); }, 240))
        << cluster_->Job("job-000001").dump();
    const nlohmann::json job = cluster_->Job("job-000001");
    EXPECT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
    EXPECT_EQ(job.value("attempt", 0), 2) << "one restart";
    return out;
  }

  std::unique_ptr<testing::LocalCluster> cluster_;
  std::string dir_, pairs_;
};

TEST_F(PreferenceClusterTest, ARewardModelJobRunsAsAnyJob) {
  const std::string spec = WriteSpec("reward", 10);
  const std::string want = RunLocally(spec, "reward");
  const std::string out = dir_ + "/out";
  auto r = cluster_->Cli({"submit", spec, "--follow", "--set", "output_dir=" + out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("SUCCEEDED"));
  ExpectSameSteps(want, out, kRewardFields, 10);
  // The coordinator's progress (what `tessera jobs`, the dashboard and Prometheus read) is the step log's.
  const nlohmann::json job = cluster_->Job("job-000001");
  ASSERT_EQ(job.value("state", ""), "JOB_STATE_SUCCEEDED") << job.dump();
  const auto& p = job["progress"];
  EXPECT_EQ(p.value("step", std::string()), "10");
  EXPECT_EQ(p.value("loss", 0.0), testing::ReadLosses(out + "/steps.jsonl").at(10));
  // TensorBoard gets the reward fields beside the loss.
  std::string events;
  for (const auto& entry : fs::directory_iterator(out + "/tensorboard")) events += Read(entry.path().string());
  std::string records;
  for (const std::string& record : formats::tensorboard::ReadRecords(events)) records += record;
  for (const char* tag : {"loss", "rewards_accuracy", "rewards_margin"}) {
    EXPECT_THAT(records, HasSubstr(tag)) << "the TensorBoard events lack " << tag;
  }
  // The checkpoint is a reward model: `tessera score` scores the example's pairs with it.
  auto scored = RunTessera({"score", out + "/checkpoints", "--data", pairs_, "--max-prompt-tokens", "40",
                            "--max-completion-tokens", "24"});
  ASSERT_EQ(scored.exit_code, 0) << scored.output;
  EXPECT_THAT(scored.output, HasSubstr("scored 300 pairs"));
}

TEST_F(PreferenceClusterTest, AKilledDpoRankResumesWithTheUndisturbedNumbers) {
  // Long enough for the kill to land after the checkpoint of step 5 and well before the end (~30 ms a
  // step here; the kill follows the checkpoint within a poll of 50 ms).
  const int steps = 150;
  const std::string spec = WriteSpec("dpo", steps);
  const std::string want = RunLocally(spec, "dpo");
  const std::string out = SubmitAndKillARank(spec);
  ExpectSameSteps(want, out, kDpoFields, steps);
}

TEST_F(PreferenceClusterTest, AKilledGrpoRankResumesAndSamplesWhatTheUndisturbedRunSampled) {
  // examples/grpo's prompts with the SFT example's tokenizer; a tiny model from the seed.
  const std::string prompts = dir_ + "/prompts";
  auto prepared = RunTessera({"data", "prepare", "--tokenizer", testing::Runfile("examples/sft"), "--prompts",
                              testing::Runfile("examples/grpo/prompts.jsonl"), prompts});
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const int steps = 100;
  const std::string spec = dir_ + "/grpo.yaml";
  std::ofstream(spec) << "name: grpo\n"
                      << "model: {family: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, "
                      << "vocab: 384, seq_len: 64}\n"
                      << "data: {path: " << prompts << "}\n"
                      << "parallel: {dp: 2}\n"
                      << "train: {objective: grpo, steps: " << steps
                      << ", micro_batch: 4, global_batch: 2, lr: 1e-3, schedule: constant}\n"
                      << "grpo: {num_generations: 4, max_completion_tokens: 8, rewards: [{name: correct, kind: "
                      << "exact_answer}, {name: digits, kind: regex, pattern: '[0-9]', weight: 0.5}]}\n"
                      << "checkpoint: {every_steps: 5, keep: 2" << testing::CheckpointAsyncYaml() << "}\n";
  const std::string want = RunLocally(spec, "grpo");
  const std::string out = SubmitAndKillARank(spec);
  ExpectSameSteps(want, out, {"loss", "grad_norm", "reward", "reward_correct", "reward_digits", "completion_length"},
                  steps);
  // Every completion as the undisturbed run sampled it, the killed attempt's lines past its checkpoint gone.
  EXPECT_EQ(Read(out + "/rollouts.jsonl"), Read(want + "/rollouts.jsonl"));
}

}  // namespace
}  // namespace tessera
