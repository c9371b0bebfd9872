// rollouts.jsonl: a record's line read back as written (a reward function's missing value as null, then
// NaN); lines that are no records refused; a resumed run's trim keeping the lines of its steps, in
// order, dropping the later ones, garbage, an over-long and an unfinished line, without following a link.
#include "common/steplog/rollout_log.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::steplog {
namespace {

namespace fs = std::filesystem;

RolloutRecord Record(int64_t step, int64_t sample) {
  RolloutRecord r;
  r.step = step;
  r.prompt_index = 3;
  r.sample = sample;
  r.prompt_ids = {1, 2, 3};
  r.completion_ids = {7, 8};
  r.logprobs = {-0.25, -1.5};
  r.rewards = {{"correct", 1.0}, {"judge", std::nan("")}};
  r.reward = 1.0;
  r.advantage = -0.5;
  r.truncated = sample == 1;
  return r;
}

TEST(RolloutLogTest, ALineReadsBackAsWritten) {
  const std::string line = FormatRolloutLine(Record(12, 1));
  EXPECT_EQ(line.rfind("{\"step\":12,", 0), 0u) << line;  // "step" first, as the trim reads it.
  EXPECT_NE(line.find("\"judge\":null"), std::string::npos) << line;
  auto r = ParseRolloutLine(line);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 12);
  EXPECT_EQ(r->prompt_index, 3);
  EXPECT_EQ(r->sample, 1);
  EXPECT_EQ(r->prompt_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(r->completion_ids, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(r->logprobs, (std::vector<double>{-0.25, -1.5}));
  ASSERT_EQ(r->rewards.size(), 2u);
  EXPECT_EQ(r->rewards[0], (std::pair<std::string, double>{"correct", 1.0}));
  EXPECT_EQ(r->rewards[1].first, "judge");
  EXPECT_TRUE(std::isnan(r->rewards[1].second));
  EXPECT_EQ(r->advantage, -0.5);
  EXPECT_TRUE(r->truncated);
  for (const char* bad : {"", "not json", "[1]", "{\"step\": 1}", "{\"step\": \"1\", \"prompt_index\": 0}"}) {
    EXPECT_FALSE(ParseRolloutLine(bad).has_value()) << bad;
  }
  std::string wrong_ids = line;
  wrong_ids.replace(wrong_ids.find("[7, 8]") == std::string::npos ? wrong_ids.find("[7,8]") : wrong_ids.find("[7, 8]"),
                    1, "[\"x\", ");
  EXPECT_FALSE(ParseRolloutLine(wrong_ids).has_value()) << wrong_ids;
}

class TrimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

TEST_F(TrimTest, KeepsTheResumedStepsLinesInOrder) {
  std::string file;
  for (int64_t step : {1, 1, 2, 3, 3}) file += FormatRolloutLine(Record(step, step % 2)) + "\n";
  file += "garbage\n";
  file += "{\"note\": \"no step\"}\n";
  file += "{\"sample\": 0, \"step\": 2}\n";         // Not the writer's prefix: parsed whole, kept.
  file += std::string(kMaxRolloutLineBytes + 10, 'x') + "\n";  // Over-long: dropped, memory bounded.
  file += FormatRolloutLine(Record(2, 0)).substr(0, 40);       // Unfinished (being written when it crashed).
  std::ofstream(dir_ / "rollouts.jsonl", std::ios::binary) << file;
  auto dropped = TrimJsonLinesToStep(dir_.string(), "rollouts.jsonl", 2);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 2);  // The two step-3 lines.
  std::string want;
  for (int64_t step : {1, 1, 2}) want += FormatRolloutLine(Record(step, step % 2)) + "\n";
  want += "{\"sample\": 0, \"step\": 2}\n";
  EXPECT_EQ(Read("rollouts.jsonl"), want);
  EXPECT_FALSE(fs::exists(dir_ / "rollouts.jsonl.tmp"));
  // Again at step 0: nothing kept. No file: nothing to do.
  ASSERT_TRUE(TrimJsonLinesToStep(dir_.string(), "rollouts.jsonl", 0).ok());
  EXPECT_EQ(Read("rollouts.jsonl"), "");
  auto none = TrimJsonLinesToStep(dir_.string(), "absent.jsonl", 5);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0);
}

TEST_F(TrimTest, ALinkIsNotFollowed) {
  const fs::path elsewhere = dir_ / "elsewhere.jsonl";
  std::ofstream(elsewhere) << FormatRolloutLine(Record(5, 0)) << "\n";
  fs::create_symlink(elsewhere, dir_ / "rollouts.jsonl");
  auto trimmed = TrimJsonLinesToStep(dir_.string(), "rollouts.jsonl", 1);
  EXPECT_FALSE(trimmed.ok());
  EXPECT_EQ(Read("elsewhere.jsonl"), FormatRolloutLine(Record(5, 0)) + "\n") << "the link's target is untouched";
}

}  // namespace
}  // namespace tessera::steplog
