// RewardSet: every kind scoring a batch in order (a real /bin/sh reward program among them), and what it
// cannot score named — the function and the completion — never a silent 0.
#include "rewards/reward_set.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::rewards {
namespace {

using ::testing::HasSubstr;

std::vector<ScoredCompletion> Batch() {
  return {{"What is 2+2?", "It is \\boxed{4}.", 6, {{"answer", 4}}},
          {"What is 2+3?", "Maybe 6", 3, {{"answer", "5"}}},
          {"What is 1+1?", std::string(40, 'x') + " 2", 12, {{"answer", 2}}}};
}

RewardFunctionOptions Function(std::string name, RewardKind kind) {
  RewardFunctionOptions o;
  o.name = std::move(name);
  o.kind = kind;
  return o;
}

TEST(RewardSetTest, EveryKindScoresTheBatchInOrder) {
  RewardFunctionOptions correct = Function("correct", RewardKind::kExactAnswer);
  RewardFunctionOptions boxed = Function("boxed", RewardKind::kRegex);
  boxed.pattern = "\\\\boxed\\{";
  boxed.weight = 0.5;
  RewardFunctionOptions length = Function("long", RewardKind::kLength);
  length.max_tokens = 10;
  length.soft_cache = 6;
  RewardFunctionOptions judge = Function("judge", RewardKind::kProgram);
  // A real program kept running: each query line's length in bytes, one number per line.
  judge.program.argv = {"/bin/sh", "-c", "while IFS= read -r line; do echo ${#line}; done"};
  auto set = RewardSet::Create({correct, boxed, length, judge});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->names(), (std::vector<std::string>{"correct", "boxed", "long", "judge"}));
  EXPECT_EQ((*set)->weights(), (std::vector<double>{1, 0.5, 1, 1}));
  auto got = (*set)->Score(Batch());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ((*got)[0], (std::vector<double>{1, 0, 1}));
  EXPECT_EQ((*got)[1], (std::vector<double>{1, 0, 0}));
  // DAPO's soft punishment: 0 up to 4 tokens, then −(n − 4)/6, −1 at 10 and beyond.
  EXPECT_EQ((*got)[2][0], -(6 - 4) / 6.0);
  EXPECT_EQ((*got)[2][1], 0.0);
  EXPECT_EQ((*got)[2][2], -1.0);
  ASSERT_EQ((*got)[3].size(), 3u);
  for (double v : (*got)[3]) EXPECT_GT(v, 20);  // Each query is one JSON line of more than 20 bytes.
  // Kept running: a second batch in order too.
  auto again = (*set)->Score({Batch()[1]});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0], (std::vector<double>{0}));
}

TEST(RewardSetTest, WhatCannotBeScoredIsNamed) {
  auto set = RewardSet::Create({Function("correct", RewardKind::kExactAnswer)});
  ASSERT_TRUE(set.ok());
  std::vector<ScoredCompletion> batch = Batch();
  batch[1].fields = {{"solution", 5}};
  auto got = (*set)->Score(batch);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("reward correct: completion 1: its prompt's row has no field \"answer\""));
  RewardFunctionOptions failing = Function("judge", RewardKind::kProgram);
  failing.program.argv = {"/bin/sh", "-c", "read line; echo oops"};
  auto broken = RewardSet::Create({failing});
  ASSERT_TRUE(broken.ok()) << broken.status();
  auto answer = (*broken)->Score(Batch());
  ASSERT_FALSE(answer.ok());
  EXPECT_THAT(std::string(answer.status().message()), HasSubstr("reward judge"));
}

TEST(RewardSetTest, AModelRewardIsTheScorersAndItsBadScoresAreNamed) {
  RewardFunctionOptions model{.name = "rm", .weight = 2, .kind = RewardKind::kModel};
  model.model_path = "/models/rm";
  std::vector<size_t> asked;
  auto set = RewardSet::Create({model}, [&](size_t f, const std::vector<ScoredCompletion>& batch) {
    asked.push_back(f);
    std::vector<double> scores;
    for (const ScoredCompletion& c : batch) scores.push_back(static_cast<double>(c.completion.size()));
    return absl::StatusOr<std::vector<double>>(scores);
  });
  ASSERT_TRUE(set.ok()) << set.status();
  auto got = (*set)->Score(Batch());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  for (size_t c = 0; c < Batch().size(); ++c) EXPECT_EQ((*got)[0][c], static_cast<double>(Batch()[c].completion.size()));
  EXPECT_EQ(asked, std::vector<size_t>{0});
  // A score that is not a number, or a scorer's error, fails naming the function (and the completion).
  auto nan = RewardSet::Create({model}, [](size_t, const std::vector<ScoredCompletion>& batch) {
    std::vector<double> scores(batch.size(), 1.0);
    scores.back() = std::nan("");
    return absl::StatusOr<std::vector<double>>(scores);
  });
  ASSERT_TRUE(nan.ok());
  auto bad = (*nan)->Score(Batch());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr(absl::StrCat("reward rm: completion ", Batch().size() - 1, ": the reward model's score is nan")));
  auto failing = RewardSet::Create({model}, [](size_t, const std::vector<ScoredCompletion>&) {
    return absl::StatusOr<std::vector<double>>(absl::InternalError("out of memory"));
  });
  ASSERT_TRUE(failing.ok());
  EXPECT_EQ(std::string((*failing)->Score(Batch()).status().message()), "reward rm: out of memory");
  // Without a scorer there is nothing to score with.
  EXPECT_THAT(std::string(RewardSet::Create({model}).status().message()), HasSubstr("reward rm: a reward model needs a scorer"));
}

TEST(RewardSetTest, BadFunctionsAreRefusedByName) {
  RewardFunctionOptions regex = Function("fmt", RewardKind::kRegex);
  regex.pattern = "(unclosed";
  RewardFunctionOptions length = Function("long", RewardKind::kLength);
  length.max_tokens = 4;
  length.soft_cache = 5;
  RewardFunctionOptions weight = Function("w", RewardKind::kExactAnswer);
  weight.weight = std::nan("");
  for (const auto& [functions, message] : std::vector<std::pair<std::vector<RewardFunctionOptions>, std::string>>{
           {{}, "rewards: there is no reward function"},
           {{Function("a", RewardKind::kExactAnswer), Function("a", RewardKind::kRegex)},
            "reward a: another reward function has the same name"},
           {{regex}, "reward fmt: "},
           {{length}, "reward long: "},
           {{weight}, "reward w: weight nan is not finite"}}) {
    auto set = RewardSet::Create(functions);
    ASSERT_FALSE(set.ok()) << message;
    EXPECT_THAT(std::string(set.status().message()), HasSubstr(message));
  }
}

}  // namespace
}  // namespace tessera::rewards
