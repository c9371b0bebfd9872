// The step log's schema: what the trainer writes (FormatStepLine) reads back member for member
// (ParseStepLine), TensorBoard's scalars are the line's numbers, and a reader tailing a growing,
// replaced or hostile file (ReadAppended) sees each complete line once.
#include "common/steplog/step_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::steplog {
namespace {

StepRecord Full() {
  StepRecord r;
  r.step = 7, r.resumed_from = 5, r.discarded_steps = 2, r.tokens = 4096, r.bytes_all_reduced = 11;
  r.bytes_communicated = 12, r.optimizer_state_bytes = 13, r.model_state_bytes = 14;
  r.rss_peak_bytes = 15, r.rss_base_bytes = 16;
  r.loss = 2.5, r.lr = 1e-4, r.grad_norm = 0.75, r.tokens_per_s = 1234.5, r.step_seconds = 0.25;
  r.skipped = true, r.loss_scale = 65536, r.trained_tokens = 3000, r.live_peak_bytes = 17;
  r.frozen_param_bytes = 18, r.mfu = 0.4, r.val_loss = 2.4, r.eval_seconds = 0.5;
  r.reference_seconds = 3.25;
  r.lm_loss = 2.3, r.aux_loss = 0.2, r.expert_imbalance = 1.5, r.expert_imbalance_layers = {1.2, 1.5};
  r.pipeline_wait_s = 0.01, r.pipeline_bubble = 0.3;
  r.checkpoint_blocked_s = 0.125, r.checkpoint_snapshot_bytes = 19;
  r.checkpoint_write_s = 1.5, r.checkpoint_write_step = 6;
  r.rewards_chosen = 0.25, r.rewards_rejected = -0.5, r.rewards_margin = 0.75, r.rewards_accuracy = 0.625;
  r.logps_chosen = -20.5, r.logps_rejected = -31.25;
  r.val_rewards_chosen = 0.125, r.val_rewards_rejected = -0.25, r.val_rewards_margin = 0.375;
  r.val_rewards_accuracy = 0.75, r.val_logps_chosen = -21.5, r.val_logps_rejected = -30.25;
  return r;
}

TEST(StepLogTest, EveryMemberWrittenReadsBack) {
  const StepRecord want = Full();
  const std::optional<StepRecord> got = ParseStepLine(FormatStepLine(want));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->step, want.step);
  EXPECT_EQ(got->resumed_from, want.resumed_from);
  EXPECT_EQ(got->discarded_steps, want.discarded_steps);
  EXPECT_EQ(got->tokens, want.tokens);
  EXPECT_EQ(got->bytes_all_reduced, want.bytes_all_reduced);
  EXPECT_EQ(got->bytes_communicated, want.bytes_communicated);
  EXPECT_EQ(got->optimizer_state_bytes, want.optimizer_state_bytes);
  EXPECT_EQ(got->model_state_bytes, want.model_state_bytes);
  EXPECT_EQ(got->rss_peak_bytes, want.rss_peak_bytes);
  EXPECT_EQ(got->rss_base_bytes, want.rss_base_bytes);
  EXPECT_EQ(got->loss, want.loss);
  EXPECT_EQ(got->lr, want.lr);
  EXPECT_EQ(got->grad_norm, want.grad_norm);
  EXPECT_EQ(got->tokens_per_s, want.tokens_per_s);
  EXPECT_EQ(got->step_seconds, want.step_seconds);
  EXPECT_EQ(got->skipped, want.skipped);
  EXPECT_EQ(got->loss_scale, want.loss_scale);
  EXPECT_EQ(got->trained_tokens, want.trained_tokens);
  EXPECT_EQ(got->live_peak_bytes, want.live_peak_bytes);
  EXPECT_EQ(got->frozen_param_bytes, want.frozen_param_bytes);
  EXPECT_EQ(got->mfu, want.mfu);
  EXPECT_EQ(got->val_loss, want.val_loss);
  EXPECT_EQ(got->eval_seconds, want.eval_seconds);
  EXPECT_EQ(got->reference_seconds, want.reference_seconds);
  EXPECT_EQ(got->lm_loss, want.lm_loss);
  EXPECT_EQ(got->aux_loss, want.aux_loss);
  EXPECT_EQ(got->expert_imbalance, want.expert_imbalance);
  EXPECT_EQ(got->expert_imbalance_layers, want.expert_imbalance_layers);
  EXPECT_EQ(got->pipeline_wait_s, want.pipeline_wait_s);
  EXPECT_EQ(got->pipeline_bubble, want.pipeline_bubble);
  EXPECT_EQ(got->checkpoint_blocked_s, want.checkpoint_blocked_s);
  EXPECT_EQ(got->checkpoint_snapshot_bytes, want.checkpoint_snapshot_bytes);
  EXPECT_EQ(got->checkpoint_write_s, want.checkpoint_write_s);
  EXPECT_EQ(got->checkpoint_write_step, want.checkpoint_write_step);
  for (const char* name : {"rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy", "logps_chosen",
                           "logps_rejected", "val_rewards_chosen", "val_rewards_rejected", "val_rewards_margin",
                           "val_rewards_accuracy", "val_logps_chosen", "val_logps_rejected"}) {
    StepRecord wrote = want, read = *got;
    ASSERT_NE(ObjectiveMetric(wrote, name), nullptr) << name;
    ASSERT_TRUE(ObjectiveMetric(wrote, name)->has_value()) << name;
    EXPECT_EQ(*ObjectiveMetric(read, name), *ObjectiveMetric(wrote, name)) << name;
  }
  StepRecord read = *got;
  EXPECT_EQ(ObjectiveMetric(read, "loss"), nullptr);
  EXPECT_FALSE(got->warning.has_value());
}

// An unset optional member is not written (readers tell "no evaluation" from a loss of 0).
TEST(StepLogTest, UnsetMembersAreNotWritten) {
  StepRecord r;
  r.step = 1;
  const nlohmann::json j = nlohmann::json::parse(FormatStepLine(r));
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"bytes_all_reduced", "bytes_communicated", "discarded_steps", "grad_norm",
                                            "loss", "lr", "model_state_bytes", "optimizer_state_bytes",
                                            "resumed_from", "rss_base_bytes", "rss_peak_bytes", "step",
                                            "step_seconds", "tokens", "tokens_per_s"}));
  const std::optional<StepRecord> back = ParseStepLine(FormatStepLine(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->val_loss || back->loss_scale || back->mfu || back->pipeline_wait_s || back->checkpoint_write_s);
}

TEST(StepLogTest, GrpoMetricsReadBackInOrderAndOthersAreNot) {
  StepRecord r;
  r.step = 3;
  r.grpo_metrics = {{"reward", 0.5},          {"reward_std", 0.25}, {"reward_correct", 1.0},
                    {"kl", 0.0},              {"clip_ratio", 0.125}, {"completion_length", 7.5},
                    {"generated_tokens_per_s", 900.0}, {"not_ours", 1.0}, {"reward_bad name", 2.0}};
  const std::string line = FormatStepLine(r);
  EXPECT_EQ(line.find("not_ours"), std::string::npos);  // Only the documented names are written.
  EXPECT_EQ(line.find("bad name"), std::string::npos);
  auto back = ParseStepLine(line);
  ASSERT_TRUE(back.has_value());
  std::map<std::string, double> got(back->grpo_metrics.begin(), back->grpo_metrics.end());
  EXPECT_EQ(got, (std::map<std::string, double>{{"reward", 0.5}, {"reward_std", 0.25}, {"reward_correct", 1.0},
                                                {"kl", 0.0}, {"clip_ratio", 0.125}, {"completion_length", 7.5},
                                                {"generated_tokens_per_s", 900.0}}));
  // TensorBoard shows them (the reward curve).
  bool reward = false;
  for (const auto& [tag, value] : Scalars(r)) reward |= tag == "train/reward" && value == 0.5;
  EXPECT_TRUE(reward);
  EXPECT_TRUE(IsGrpoMetric("reward_has_a"));
  EXPECT_FALSE(IsGrpoMetric("reward_"));
  EXPECT_FALSE(IsGrpoMetric("rewards_chosen"));  // DPO's, a member of its own.
  EXPECT_FALSE(IsGrpoMetric("loss"));
}

TEST(StepLogTest, ScalarsAreTheLinesNumbers) {
  const StepRecord r = Full();
  std::map<std::string, double> scalars;
  for (const auto& [tag, value] : Scalars(r)) EXPECT_TRUE(scalars.emplace(tag, value).second) << tag;
  const nlohmann::json j = nlohmann::json::parse(FormatStepLine(r));
  size_t numbers = 0;
  for (const auto& [key, value] : j.items()) {
    if (key == "step" || !value.is_number()) continue;
    ++numbers;
    const std::string tag = (key == "eval_seconds" || key.rfind("val_", 0) == 0 ? "val/" : "train/") + key;
    ASSERT_TRUE(scalars.count(tag)) << tag;
    EXPECT_EQ(scalars[tag], value.get<double>()) << tag;
  }
  EXPECT_EQ(scalars.size(), numbers);
  EXPECT_FALSE(scalars.count("train/skipped")) << "not a number";
  EXPECT_FALSE(scalars.count("train/expert_imbalance_layers")) << "not a number";
  EXPECT_EQ(scalars["val/val_loss"], 2.4);
  EXPECT_EQ(scalars["val/val_rewards_accuracy"], 0.75);
  EXPECT_EQ(scalars["train/rewards_accuracy"], 0.625);
}

class ReadAppendedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/steps_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".jsonl";
    std::remove(path_.c_str());
  }
  void Append(const std::string& text) { std::ofstream(path_, std::ios::app) << text; }
  // The lines ReadAppended passes from the file now.
  std::vector<std::string> Read(int64_t max_bytes = 1 << 20, bool* replaced = nullptr, bool* at_end = nullptr) {
    std::vector<std::string> lines;
    const int fd = open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    const Appended a = ReadAppended(fd, &position_, max_bytes, [&](std::string_view l) { lines.emplace_back(l); });
    close(fd);
    EXPECT_TRUE(a.ok);
    if (replaced) *replaced = a.replaced;
    if (at_end) *at_end = a.at_end;
    return lines;
  }
  std::string path_;
  TailPosition position_;
};

TEST_F(ReadAppendedTest, CompleteLinesOnceAndAPartialLineWhenFinished) {
  Append("{\"step\": 1}\n{\"step\": 2}\n{\"ste");
  EXPECT_EQ(Read(), (std::vector<std::string>{"{\"step\": 1}", "{\"step\": 2}"}));
  EXPECT_TRUE(Read().empty()) << "the partial line waits";
  Append("p\": 3}\n");
  EXPECT_EQ(Read(), (std::vector<std::string>{"{\"step\": 3}"}));
}

TEST_F(ReadAppendedTest, AReplacedFileIsReadFromItsStart) {
  Append("{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n");
  EXPECT_EQ(Read().size(), 3u);
  // Rank 0 resumes from step 1: a new file with step 1, renamed into place, then step 2 again.
  const std::string tmp = path_ + ".tmp";
  std::ofstream(tmp) << "{\"step\": 1}\n{\"step\": 2}\n";
  ASSERT_EQ(std::rename(tmp.c_str(), path_.c_str()), 0);
  bool replaced = false;
  EXPECT_EQ(Read(1 << 20, &replaced), (std::vector<std::string>{"{\"step\": 1}", "{\"step\": 2}"}));
  EXPECT_TRUE(replaced);
  // Cut shorter in place: read from its start too.
  std::ofstream(path_, std::ios::trunc) << "{\"step\": 9}\n";
  EXPECT_EQ(Read(), (std::vector<std::string>{"{\"step\": 9}"}));
}

TEST_F(ReadAppendedTest, ReadsAreBoundedAndALineLongerThanOneIsSkipped) {
  Append(std::string(100, 'x') + "\n{\"step\": 4}\n");
  // 32 bytes a read: three reads of the long line without its newline are skipped whole; the fourth
  // has its last 4 bytes (a fragment ParseStepLine refuses) and the step after it.
  bool at_end = true;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(Read(/*max_bytes=*/32, nullptr, &at_end).empty()) << i;
    EXPECT_FALSE(at_end) << "more is there";
  }
  EXPECT_EQ(Read(32, nullptr, &at_end), (std::vector<std::string>{"xxxx", "{\"step\": 4}"}));
  EXPECT_TRUE(at_end);
  EXPECT_FALSE(ParseStepLine("xxxx").has_value());
}

}  // namespace
}  // namespace tessera::steplog
