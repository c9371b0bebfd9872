// AttemptFence against its contract: claims, superseded claims and checks, other jobs, damaged markers.
#include "formats/checkpoint/attempt_fence.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::parallel {
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
  std::ofstream(f.path(), std::ios::trunc) << "{\"job\": \"j@1\", \"attempt\": ";
  EXPECT_EQ(f.Check().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(f.Claim().ok());  // A damaged marker is replaced by the claim.
  EXPECT_TRUE(f.Check().ok());
}

TEST(AttemptFenceTest, UnfencedRunsNeitherWriteNorCheck) {
  const std::string dir = Dir("local");
  AttemptFence local(dir, {"", 0});
  EXPECT_TRUE(local.Claim().ok());
  EXPECT_FALSE(std::filesystem::exists(local.path()));
  EXPECT_TRUE(local.Check().ok());
}

}  // namespace
}  // namespace tessera::parallel
