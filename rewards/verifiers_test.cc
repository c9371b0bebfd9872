// The built-in verifiers' definitions (rewards/verifiers.h), case by case.
#include "rewards/verifiers.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::rewards {
namespace {

using ::testing::HasSubstr;

TEST(VerifiersTest, TheAnswerIsTheLastBoxedElseTheLastNumber) {
  EXPECT_EQ(ExtractAnswer("3 apples and 4 pears: 7"), "7");
  EXPECT_EQ(ExtractAnswer("so \\boxed{12} (not 13)"), "12");
  EXPECT_EQ(ExtractAnswer("\\boxed{1} then \\boxed{\\frac{1}{2}}"), "\\frac{1}{2}");
  EXPECT_EQ(ExtractAnswer("\\boxed{2} and an open \\boxed{3"), "2") << "braces must close";
  EXPECT_EQ(ExtractAnswer("it costs 1,234.50 dollars, -7 left"), "-7");
  EXPECT_EQ(ExtractAnswer("total: 1,234,567."), "1,234,567");
  EXPECT_EQ(ExtractAnswer("pi is about 3.14"), "3.14");
  EXPECT_EQ(ExtractAnswer("3-5"), "5");
  EXPECT_EQ(ExtractAnswer("The primes are 2,3,5,7"), "7");
  std::string unclosed;
  for (int k = 0; k < 200000; ++k) unclosed += "\\boxed{";
  EXPECT_EQ(ExtractAnswer(unclosed + " 42"), "42") << "linear: 1.4 MB of unclosed boxes";
  EXPECT_EQ(ExtractAnswer("no numbers here"), "");
  EXPECT_EQ(ExtractAnswer(""), "");
}

TEST(VerifiersTest, AnswersAreComparedNormalised) {
  EXPECT_EQ(NormalizeAnswer(" 1,000.50 "), "1000.5");
  EXPECT_EQ(NormalizeAnswer("+007"), "7");
  EXPECT_EQ(NormalizeAnswer("-0.0"), "0");
  EXPECT_EQ(NormalizeAnswer("3."), "3");
  EXPECT_EQ(NormalizeAnswer(".5"), "0.5");
  EXPECT_EQ(NormalizeAnswer("  New   York\n"), "New York");
  EXPECT_EQ(NormalizeAnswer("\\frac{1}{2}"), "\\frac{1}{2}");
  EXPECT_EQ(NormalizeAnswer("1e+20"), "100000000000000000000");
  EXPECT_EQ(NormalizeAnswer("1e-07"), "0.0000001");
  EXPECT_EQ(NormalizeAnswer("-2.5E1"), "-25");
  EXPECT_EQ(NormalizeAnswer("1e99999"), "1e99999") << "not taken for a number: compared as text";
}

TEST(VerifiersTest, ExactAnswerScoresOneOnlyForTheRightAnswer) {
  const nlohmann::json seven = 7, text = "1000.5", real = 2.50;
  EXPECT_EQ(*ExactAnswerReward("The answer is 7.", seven), 1.0);
  EXPECT_EQ(*ExactAnswerReward("7, no wait, 8", seven), 0.0) << "the last number counts";
  EXPECT_EQ(*ExactAnswerReward("\\boxed{7} and 9 more", seven), 1.0) << "a boxed answer wins";
  EXPECT_EQ(*ExactAnswerReward("it is 1,000.50", text), 1.0);
  EXPECT_EQ(*ExactAnswerReward("2.5", real), 1.0);
  EXPECT_EQ(*ExactAnswerReward("100000000000000000000", nlohmann::json(1e20)), 1.0) << "dumped as 1e+20";
  EXPECT_EQ(*ExactAnswerReward("0.0000001", nlohmann::json(1e-7)), 1.0);
  EXPECT_EQ(*ExactAnswerReward("no idea", seven), 0.0);
  EXPECT_THAT(std::string(ExactAnswerReward("7", nlohmann::json()).status().message()), HasSubstr("no answer field"));
  EXPECT_EQ(ExactAnswerReward("7", nlohmann::json::array()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VerifiersTest, LengthIsDaposSoftOverlongPunishment) {
  // TRL's docstring example: max 100, cache 20, 90 tokens → -0.5.
  EXPECT_EQ(*SoftOverlongPunishment(90, 100, 20), -0.5);
  EXPECT_EQ(*SoftOverlongPunishment(80, 100, 20), 0.0);
  EXPECT_EQ(*SoftOverlongPunishment(81, 100, 20), -1.0 / 20);
  EXPECT_EQ(*SoftOverlongPunishment(100, 100, 20), -1.0);
  EXPECT_EQ(*SoftOverlongPunishment(101, 100, 20), -1.0);
  EXPECT_EQ(*SoftOverlongPunishment(100, 100, 0), 0.0) << "no cache: no punishment up to the maximum";
  EXPECT_EQ(*SoftOverlongPunishment(101, 100, 0), -1.0);
  EXPECT_EQ(SoftOverlongPunishment(1, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SoftOverlongPunishment(1, 10, 11).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SoftOverlongPunishment(1, 10, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VerifiersTest, RegexScoresWhetherThePatternMatches) {
  auto r = RegexReward::Create("<think>.*</think>");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*(*r)->Score("<think>hm</think> 4"), 1.0);
  EXPECT_EQ(*(*r)->Score("4"), 0.0);
  EXPECT_EQ(*(*r)->Score(std::string("<think>\xff</think>", 16)), 1.0) << "invalid UTF-8 read as U+FFFD";
  auto bad = RegexReward::Create("(unclosed");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("pattern: "));
}

}  // namespace
}  // namespace tessera::rewards
