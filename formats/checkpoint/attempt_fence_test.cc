// AttemptFence against its contract: claims, superseded claims and checks, other jobs, damaged markers.
#include "formats/checkpoint/attempt_fence.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::checkpoint {
namespace {

using ::testing::HasSubstr;

std::string Dir(const std::string& name) {
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/fence_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(AttemptFenceTest, TheNewestAttemptOwnsTheDirectory) {
  const std::string dir = Dir("newest");
  AttemptFence one(dir, {"job-000001@5", 1}), two(dir, {"job-000001@5", 2});
  ASSERT_TRUE(one.Claim().ok());
  EXPECT_TRUE(one.Check().ok());
  ASSERT_TRUE(two.Claim().ok());
  EXPECT_TRUE(two.Check().ok());
  absl::Status old = one.Check();
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.message(), HasSubstr("attempt 1 of job job-000001@5 was superseded by attempt 2"));
  // A superseded attempt that starts late (its order delayed) does not take the directory back.
  absl::Status late = one.Claim();
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.message(), HasSubstr("older than attempt 2"));
  EXPECT_TRUE(two.Check().ok());
}

TEST(AttemptFenceTest, AnotherJobTakesTheDirectoryOver) {
  // The coordinator's database was recreated: ids start again, the creation time differs.
  const std::string dir = Dir("other_job");
  AttemptFence old_job(dir, {"job-000001@5", 7}), new_job(dir, {"job-000001@9", 1});
  ASSERT_TRUE(old_job.Claim().ok());
  ASSERT_TRUE(new_job.Claim().ok());
  EXPECT_THAT(old_job.Check().message(), HasSubstr("superseded by job job-000001@9 attempt 1"));
}

TEST(AttemptFenceTest, AMissingOrDamagedMarkerIsNotThisAttempts) {
  const std::string dir = Dir("damaged");
  AttemptFence f(dir, {"j@1", 3});
  EXPECT_THAT(f.Check().message(), HasSubstr("missing or unreadable"));
  ASSERT_TRUE(f.Claim().ok());
  // A claim damaged after it was written (or one cut short by a crash) names no attempt.
  const std::string newest = (*std::filesystem::directory_iterator(f.claims_dir())).path().string();
  std::ofstream(newest, std::ios::trunc) << "{\"job\": \"j@1\", \"attempt\": ";
  EXPECT_EQ(f.Check().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(f.Claim().ok());  // A claim after the damaged one.
  EXPECT_TRUE(f.Check().ok());
  EXPECT_THAT(f.Check().ToString(), ::testing::Not(HasSubstr("superseded")));
}

// Two attempts claiming at once, many times over from two threads (the newer one started while the
// older one's order was still delayed): the newer attempt always ends up the owner, and an older claim
// never replaces it — whichever thread runs first. (Before the claims were exclusive, the older attempt
// could read the marker before the newer one wrote it and rename its own over it.)
TEST(AttemptFenceTest, RacingClaimsLeaveTheNewerAttemptTheOwner) {
  for (int round = 0; round < 50; ++round) {
    const std::string dir = Dir("race");
    AttemptFence older(dir, {"job@1", 2}), newer(dir, {"job@1", 3});
    absl::Status a, b;
    std::thread t1([&] { a = older.Claim(); });
    std::thread t2([&] { b = newer.Claim(); });
    t1.join();
    t2.join();
    ASSERT_TRUE(b.ok()) << "round " << round << ": " << b;
    EXPECT_TRUE(newer.Check().ok()) << "round " << round;
    EXPECT_FALSE(older.Check().ok()) << "round " << round;
    if (!a.ok()) {
      EXPECT_THAT(a.message(), HasSubstr("attempt 3"));
    }
  }
}

// OUTPUT_DIR is the user's: attempt.claims as a link into another job's directory would take that
// job's fence (each attempt of this one failing the other's next check); a FIFO as the newest claim
// would hang the claim's read. Refused, and read without waiting.
TEST(AttemptFenceTest, PlantedLinksAndFifosInTheClaimsAreHarmless) {
  const std::string dir = Dir("planted"), other = Dir("planted_other");
  AttemptFence theirs(other, {"job-000002@9", 1});
  ASSERT_TRUE(theirs.Claim().ok());
  std::filesystem::create_directories(dir);
  std::filesystem::create_directory_symlink(other + "/attempt.claims", dir + "/attempt.claims");
  AttemptFence mine(dir, {"job-000001@5", 1});
  absl::Status linked = mine.Claim();
  EXPECT_EQ(linked.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(linked.message(), HasSubstr("is not a directory of its own"));
  EXPECT_TRUE(theirs.Check().ok()) << "the other job keeps its directory";
  std::filesystem::remove(dir + "/attempt.claims");
  ASSERT_TRUE(mine.Claim().ok());
  ASSERT_EQ(mkfifo((dir + "/attempt.claims/00000000000000000099").c_str(), 0644), 0);
  absl::Status check = mine.Check();  // Returns (the FIFO is no claim of this attempt's); never blocks.
  EXPECT_FALSE(check.ok());
}

TEST(AttemptFenceTest, UnfencedRunsNeitherWriteNorCheck) {
  const std::string dir = Dir("local");
  AttemptFence local(dir, {"", 0});
  EXPECT_TRUE(local.Claim().ok());
  EXPECT_FALSE(std::filesystem::exists(local.path()));
  EXPECT_TRUE(local.Check().ok());
}

}  // namespace
}  // namespace tessera::formats::checkpoint
