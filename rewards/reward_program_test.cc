// RewardProgram with real child processes (/bin/sh): scores come back in order; a program that
// prints a non-number, crashes, hangs, cannot be executed, or prints more lines than asked is an
// error naming it with its stderr, and stays one; large batches do not deadlock on full pipes.
#include "rewards/reward_program.h"

#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::rewards {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<RewardProgram> Shell(const std::string& script, absl::Duration timeout = absl::Seconds(20)) {
  RewardProgramOptions o;
  o.name = "check";
  o.argv = {"/bin/sh", "-c", script};
  o.timeout = timeout;
  auto p = RewardProgram::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

std::vector<RewardQuery> Queries(int n) {
  std::vector<RewardQuery> q(n);
  for (int i = 0; i < n; ++i) {
    q[i].prompt = "What is " + std::to_string(i) + "+1?";
    q[i].completion = std::string(i % 7, 'x');
    q[i].fields = {{"answer", i + 1}};
  }
  return q;
}

TEST(RewardProgramTest, ScoresComeBackInOrderOnePerQuery) {
  // The score is the length of the JSON line the program was given: proves order and content.
  auto p = Shell("while IFS= read -r l; do echo ${#l}; done");
  ASSERT_NE(p, nullptr);
  for (int round = 0; round < 3; ++round) {
    const std::vector<RewardQuery> q = Queries(5);
    auto scores = p->Score(q);
    ASSERT_TRUE(scores.ok()) << scores.status();
    ASSERT_EQ(scores->size(), 5u);
    for (int i = 0; i < 5; ++i) {
      nlohmann::json line = {{"prompt", q[i].prompt}, {"completion", q[i].completion}, {"fields", q[i].fields}};
      EXPECT_EQ((*scores)[i], static_cast<double>(line.dump().size())) << i;
    }
  }
  EXPECT_TRUE(p->Score({}).ok());
}

TEST(RewardProgramTest, ALargeBatchDoesNotDeadlockOnFullPipes) {
  // Prints a long stderr line per query too: both pipes fill up unless they are drained while writing.
  auto p = Shell("while IFS= read -r l; do echo 1; printf '%0500d\\n' 0 >&2; done");
  ASSERT_NE(p, nullptr);
  auto scores = p->Score(Queries(20000));
  ASSERT_TRUE(scores.ok()) << scores.status();
  EXPECT_EQ(scores->size(), 20000u);
}

TEST(RewardProgramTest, ANonNumberIsAnErrorNamingTheLineAndStaysOne) {
  auto p = Shell("read l; echo 0.25; read l; echo 'about 3'; echo 'bad day' >&2; cat > /dev/null");
  ASSERT_NE(p, nullptr);
  auto scores = p->Score(Queries(2));
  ASSERT_FALSE(scores.ok());
  const std::string m(scores.status().message());
  EXPECT_THAT(m, HasSubstr("reward check (/bin/sh): answer 2 of 2 is \"about 3\", not a finite JSON number"));
  EXPECT_THAT(m, HasSubstr("its stderr ends:\nbad day"));
  auto again = p->Score(Queries(1));
  EXPECT_EQ(again.status(), scores.status()) << "the program is stopped: every later batch fails the same";
  for (const char* bad : {"NaN", "1e999", "true", "[1]", "\"1\"", ""}) {
    auto q = Shell(std::string("read l; echo '") + bad + "'; cat > /dev/null");
    ASSERT_NE(q, nullptr);
    EXPECT_FALSE(q->Score(Queries(1)).ok()) << bad;
  }
}

TEST(RewardProgramTest, AProgramThatExitsIsAnErrorWithItsExitAndStderr) {
  auto p = Shell("read l; echo 'Traceback: KeyError answer' >&2; exit 3");
  ASSERT_NE(p, nullptr);
  auto scores = p->Score(Queries(4));
  ASSERT_FALSE(scores.ok());
  EXPECT_THAT(std::string(scores.status().message()), HasSubstr("stopped (exit code 3)"));
  EXPECT_THAT(std::string(scores.status().message()), HasSubstr("Traceback: KeyError answer"));
  auto crash = Shell("kill -SEGV $$");
  ASSERT_NE(crash, nullptr);
  EXPECT_THAT(std::string(crash->Score(Queries(1)).status().message()), HasSubstr("signal 11"));
  RewardProgramOptions o;
  o.name = "missing";
  o.argv = {"/nonexistent/verifier"};
  auto missing = RewardProgram::Start(o);
  ASSERT_TRUE(missing.ok());
  const std::string m((*missing)->Score(Queries(1)).status().message());
  EXPECT_THAT(m, HasSubstr("exit code 127"));
  EXPECT_THAT(m, HasSubstr("cannot execute /nonexistent/verifier"));
  o.argv = {};
  EXPECT_EQ(RewardProgram::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RewardProgramTest, AHangingProgramIsKilledAtItsTimeout) {
  auto p = Shell("read l; echo 1; echo 'thinking' >&2; sleep 600", absl::Milliseconds(500));
  ASSERT_NE(p, nullptr);
  const pid_t pid = p->pid();
  const absl::Time start = absl::Now();
  auto scores = p->Score(Queries(3));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(scores.ok());
  EXPECT_THAT(std::string(scores.status().message()), HasSubstr("gave 1 of 3 scores within its timeout of 500ms; killed"));
  EXPECT_THAT(std::string(scores.status().message()), HasSubstr("thinking"));
  EXPECT_LT(took, absl::Seconds(30)) << "bounded by the timeout, not by the program";
  EXPECT_NE(kill(pid, 0), 0) << "the program is gone";
}

TEST(RewardProgramTest, MoreLinesThanQueriesIsAnError) {
  auto p = Shell("while read l; do echo 1; echo 2; done");
  ASSERT_NE(p, nullptr);
  auto scores = p->Score(Queries(1));
  ASSERT_FALSE(scores.ok());
  EXPECT_THAT(std::string(scores.status().message()), HasSubstr("printed more lines than it was given queries (\"2\""));
}

TEST(RewardProgramTest, AClosedStderrOrAnExitedLeaderIsNotMistakenForWork) {
  // Closing its stderr must not make the caller spin, and answers still come.
  auto quiet = Shell("exec 2>&-; while read l; do echo 1; done");
  ASSERT_NE(quiet, nullptr);
  auto scores = quiet->Score(Queries(3));
  ASSERT_TRUE(scores.ok()) << scores.status();
  // A program that exits while a child it started holds its stdout: named as an exit, not a hang.
  auto orphaned = Shell("(sleep 30) & echo boom >&2; exit 1", absl::Milliseconds(500));
  ASSERT_NE(orphaned, nullptr);
  const std::string m(orphaned->Score(Queries(2)).status().message());
  EXPECT_THAT(m, HasSubstr("stopped (exit code 1) after 0 of 2 scores, while a process it started kept its stdout open"));
  EXPECT_THAT(m, HasSubstr("boom"));
}

TEST(RewardProgramTest, InvalidUtf8InACompletionReachesTheProgramReplaced) {
  // U+FFFD is EF BF BD in UTF-8 (nlohmann writes it raw).
  auto p = Shell("while IFS= read -r l; do case \"$l\" in *$(printf '\\357\\277\\275')*) echo 1 ;; *) echo 0 ;; esac; done");
  ASSERT_NE(p, nullptr);
  std::vector<RewardQuery> q(1);
  q[0].completion = std::string("caf\xc3", 4);  // Cut inside "é".
  auto scores = p->Score(q);
  ASSERT_TRUE(scores.ok()) << scores.status();
  EXPECT_EQ(*scores, std::vector<double>{1});
}

}  // namespace
}  // namespace tessera::rewards
