#include "common/userfs/user_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::userfs {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class UserFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = fs::path(tmp != nullptr ? tmp : "/tmp") /
           (std::string("userfs_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "job");
    fs::create_directories(dir_ / "other");
    base_ = (dir_ / "job").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::string base_;
};

TEST_F(UserFilesTest, AppendsCreatesDirectoriesAndReads) {
  auto w = OpenUnder(base_, "logs/rank_0.log", {Access::kAppend, /*create_dirs=*/true});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(WriteAll(w->get(), "one\nerror: first\ntwo\nerror: second\nthree\n").ok());
  auto r = OpenUnder(base_, "logs/rank_0.log", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*FileSize(r->get()), 41);
  EXPECT_EQ(*ReadAt(r->get(), 4, 5), "error");
  EXPECT_EQ(*ReadAt(r->get(), 38, 100), "ee\n") << "fewer bytes at the end";
  EXPECT_EQ(LastLineWithPrefix(r->get(), "error: "), "error: second");
  EXPECT_EQ(LastLineWithPrefix(r->get(), "error: ", 20), "error: second") << "the tail begins with it";
  EXPECT_EQ(LastLineWithPrefix(r->get(), "error: ", 19), "") << "only the tail is read, whole lines";
  EXPECT_EQ(OpenUnder(base_, "steps.jsonl", {}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenUnder(base_, "../other/x", {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenUnder(base_, "a//b", {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(UserFilesTest, AFifoIsRefusedAtOnceForReadingAndWriting) {
  ASSERT_EQ(mkfifo((dir_ / "job/steps.jsonl").c_str(), 0644), 0);
  const absl::Time start = absl::Now();
  auto r = OpenUnder(base_, "steps.jsonl", {});
  auto w = OpenUnder(base_, "steps.jsonl", {Access::kAppend});
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "never waits for the FIFO's other end";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("steps.jsonl: is a FIFO, not a regular file"));
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(w.status().message(), HasSubstr("steps.jsonl: is a FIFO"));
}

TEST_F(UserFilesTest, SymbolicLinksAreNeverFollowed) {
  // A link to /dev/zero in place of the file, and a link out of the job's directory in place of a
  // directory: neither is followed, for reading or writing, nothing is written in the other directory.
  fs::create_symlink("/dev/zero", dir_ / "job/steps.jsonl");
  auto r = OpenUnder(base_, "steps.jsonl", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("steps.jsonl: is a symbolic link; refused"));
  fs::create_directory_symlink(dir_ / "other", dir_ / "job/tensorboard");
  auto w = OpenUnder(base_, "tensorboard/events", {Access::kWrite, /*create_dirs=*/true});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(w.status().message(), HasSubstr("tensorboard: is a symbolic link"));
  EXPECT_FALSE(OpenDirUnder(base_, "tensorboard", true).ok());
  EXPECT_TRUE(fs::is_empty(dir_ / "other"));
  std::ofstream(dir_ / "other/rank_0.log") << "theirs\n";
  fs::create_symlink(dir_ / "other/rank_0.log", dir_ / "job/rank_0.log");
  EXPECT_FALSE(OpenUnder(base_, "rank_0.log", {Access::kAppend}).ok());
  std::ifstream theirs(dir_ / "other/rank_0.log");
  std::string line;
  std::getline(theirs, line);
  EXPECT_EQ(line, "theirs");
}

TEST_F(UserFilesTest, DirectoriesAndHardLinksAreRefusedByName) {
  fs::create_directories(dir_ / "job/steps.jsonl");
  auto r = OpenUnder(base_, "steps.jsonl", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("is a directory, not a regular file"));
  EXPECT_FALSE(OpenUnder(base_, "steps.jsonl", {Access::kAppend}).ok());
  std::ofstream(dir_ / "job/ranks") << "a file where a directory belongs";
  auto d = OpenUnder(base_, "ranks/rank_0.jsonl", {Access::kWrite, true});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(d.status().message(), HasSubstr("ranks: is a regular file, not a directory"));
  std::ofstream(dir_ / "other/theirs") << "x";
  fs::create_hard_link(dir_ / "other/theirs", dir_ / "job/mine");
  EXPECT_THAT(OpenUnder(base_, "mine", {Access::kAppend}).status().message(), HasSubstr("2 hard links"));
  EXPECT_TRUE(OpenUnder(base_, "mine", {}).ok()) << "reading through a hard link harms nobody";
}

TEST_F(UserFilesTest, ADirectoryBelowTheBaseMustNotBeALink) {
  EXPECT_TRUE(CheckDirBelow(base_, base_ + "/checkpoints").ok());
  EXPECT_TRUE(fs::is_directory(dir_ / "job/checkpoints")) << "made";
  EXPECT_TRUE(CheckDirBelow(base_, (dir_ / "other/ckpt").string()).ok()) << "not below: not this check's";
  fs::create_directory_symlink(dir_ / "other", dir_ / "job/ckpt2");
  absl::Status s = CheckDirBelow(base_, base_ + "/ckpt2/deeper");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("ckpt2: is a symbolic link"));
  EXPECT_FALSE(fs::exists(dir_ / "other/deeper"));
}

TEST_F(UserFilesTest, WriteTruncatesOnlyARegularFile) {
  std::ofstream(dir_ / "job/f") << "old contents";
  auto w = OpenUnder(base_, "f", {Access::kWrite});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(WriteAll(w->get(), "new").ok());
  EXPECT_EQ(fs::file_size(dir_ / "job/f"), 3u);
}

// The worker's work dir: made 0700, an existing one of ours made private, one owned by another user,
// a link or a file refused by name (before: any directory, made by anyone, with any mode).
TEST(RelativeBelowTest, ComparesNormalisedComponents) {
  EXPECT_EQ(*RelativeBelow("/out", "/out/alice/job"), "alice/job");
  EXPECT_EQ(*RelativeBelow("/out/", "/out//alice/./job/"), "alice/job");
  EXPECT_EQ(*RelativeBelow("/out", "/out"), "");
  EXPECT_FALSE(RelativeBelow("/out", "/outside/job").ok());  // A prefix of the name is not a parent.
  EXPECT_FALSE(RelativeBelow("/out", "/out/../etc").ok());
  EXPECT_FALSE(RelativeBelow("/out", "relative/job").ok());
  EXPECT_THAT(RelativeBelow("/out/a", "/out").status().message(), HasSubstr("/out: not below /out/a"));
}

TEST_F(UserFilesTest, APrivateDirIsOursAndOnlyOurs) {
  const std::string work = (dir_ / "a/b/work").string();
  ASSERT_TRUE(MakePrivateDir(work).ok());
  EXPECT_EQ(fs::status(work).permissions(), fs::perms::owner_all);
  fs::permissions(work, fs::perms::all);  // 0777: made private again.
  ASSERT_TRUE(MakePrivateDir(work).ok());
  EXPECT_EQ(fs::status(work).permissions(), fs::perms::owner_all);
  fs::create_directory_symlink(dir_ / "other", dir_ / "link");
  auto link = MakePrivateDir((dir_ / "link").string());
  EXPECT_THAT(link.message(), HasSubstr("link: is a symbolic link, not a directory"));
  std::ofstream(dir_ / "file") << "x";
  EXPECT_THAT(MakePrivateDir((dir_ / "file").string()).message(), HasSubstr("file: is a regular file, not a directory"));
  if (geteuid() == 0) {  // Another user's directory (root can give one away).
    const std::string theirs = (dir_ / "theirs").string();
    fs::create_directory(theirs);
    ASSERT_EQ(chown(theirs.c_str(), 12345, 12345), 0);
    EXPECT_THAT(MakePrivateDir(theirs).message(), HasSubstr("theirs: is owned by uid 12345, not by this user (uid 0)"));
    EXPECT_NE(fs::status(theirs).permissions(), fs::perms::owner_all) << "left as it was";
    // Below a directory of another user, or one that others may write to (not sticky): another user
    // could rename our directory away and put theirs in its place. Below a sticky one (/tmp): ours.
    EXPECT_THAT(MakePrivateDir(theirs + "/work").message(), HasSubstr("its ancestor " + theirs + " is owned by uid 12345"));
    const std::string open_dir = (dir_ / "open").string();
    fs::create_directory(open_dir);
    fs::permissions(open_dir, fs::perms::all);
    EXPECT_THAT(MakePrivateDir(open_dir + "/work").message(),
                HasSubstr("its ancestor " + open_dir + " is writable by other users (mode 0777, not sticky)"));
    fs::create_directory_symlink(open_dir, dir_ / "to_open");  // Through a link: the real path is checked.
    EXPECT_THAT(MakePrivateDir((dir_ / "to_open/work").string()).message(), HasSubstr("is writable by other users"));
    fs::permissions(open_dir, fs::perms::all | fs::perms::sticky_bit);
    EXPECT_TRUE(MakePrivateDir(open_dir + "/work").ok());
    // A link on the way owned by another user (in a sticky directory, say) could be re-pointed later:
    // refused even while it points somewhere safe.
    fs::create_directory(dir_ / "safe");
    fs::create_directory_symlink(dir_ / "safe", open_dir + "/theirs_link");
    ASSERT_EQ(lchown((open_dir + "/theirs_link").c_str(), 12345, 12345), 0);
    EXPECT_THAT(MakePrivateDir(open_dir + "/theirs_link/work").message(),
                HasSubstr("theirs_link is a symbolic link owned by uid 12345"));
  }
  // Missing parents are made 0755 whatever the umask (002 would leave them group-writable and refused).
  const mode_t old = umask(002);
  const std::string deep = (dir_ / "new/a/work").string();
  EXPECT_TRUE(MakePrivateDir(deep).ok()) << MakePrivateDir(deep);
  umask(old);
  EXPECT_EQ(fs::status(dir_ / "new").permissions(), fs::perms::owner_all | fs::perms::group_read |
                                                         fs::perms::group_exec | fs::perms::others_read |
                                                         fs::perms::others_exec);
  {
    // A trailing slash names the same directory.
    EXPECT_TRUE(MakePrivateDir(deep + "/").ok());
  }
}

}  // namespace
}  // namespace tessera::userfs
