// Checkpoint durability: CRC-32C, checked and fsynced writes, commit, and finding the newest
// checkpoint whose files match the sizes and checksums in its index.
#include "formats/checkpoint/checkpoint_dir.h"

#include <sys/resource.h>
#include <unistd.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/crc32c.h"
#include "formats/checkpoint/durable_file.h"
#include "formats/checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Fresh(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/checkpoint_dir_test_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Crc32cTest, MatchesTheStandardCheckValueAndTheTableEverywhere) {
  // The CRC-32C check value: the checksum of the nine ASCII bytes "123456789" is 0xE3069283
  // (RFC 3720, appendix B.4 lists the same polynomial; this value is the catalogue's "check").
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable(0, "123456789", 9), 0xE3069283u);
  std::mt19937 gen(7);
  std::string data(4099, '\0');
  for (char& c : data) c = static_cast<char>(gen());
  // Every start alignment and many lengths: the instruction path (8-byte words after an unaligned
  // head) equals the byte table, and checksums chain.
  for (size_t start = 0; start < 9; ++start) {
    for (size_t len : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4090}) {
      const uint32_t want = Crc32cPortable(0, data.data() + start, len);
      EXPECT_EQ(Crc32c(0, data.data() + start, len), want) << start << " " << len;
      const size_t half = len / 3;
      EXPECT_EQ(Crc32c(Crc32c(0, data.data() + start, half), data.data() + start + half, len - half), want);
    }
  }
}

TEST(DurableFileTest, DigestIsTheFilesAndAFullDiskIsANamedError) {
  const std::string dir = Fresh("durable");
  DurableWriter w;
  ASSERT_TRUE(w.Open(dir + "/f").ok());
  ASSERT_TRUE(w.Append("hello ").ok());
  ASSERT_TRUE(w.Append("world").ok());
  auto d = w.Finish();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->bytes, 11);
  EXPECT_EQ(d->crc32c, Crc32cPortable(0, "hello world", 11));
  auto again = DigestFile(dir + "/f");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->bytes, 11);
  EXPECT_EQ(again->crc32c, d->crc32c);
  // /dev/full answers every write with ENOSPC, as a full disk does.
  auto full = WriteFileDurably("/dev/full", std::string(4096, 'x'));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("/dev/full: write failed: No space left on device"));
  EXPECT_FALSE(DigestFile(dir + "/missing").ok());
}

// A checkpoint of `step` holding one safetensors file and an index recording its digest.
void WriteCheckpoint(const std::string& dir, int64_t step) {
  auto tmp = BeginCheckpoint(dir, step);
  ASSERT_TRUE(tmp.ok());
  FileDigest d;
  RawTensor t{"F32", {4}, std::string(16, static_cast<char>(step))};
  ASSERT_TRUE(WriteSafetensors(*tmp + "/model.safetensors", {{"w", t}}, {}, &d).ok());
  auto index = WriteFileDurably(
      *tmp + "/index.json",
      absl::StrCat("{\"files\": {\"model.safetensors\": {\"bytes\": ", d.bytes, ", \"crc32c\": ", d.crc32c, "}}}"));
  ASSERT_TRUE(index.ok());
  ASSERT_TRUE(CommitCheckpoint(dir, *tmp, step, /*keep=*/3).ok());
}

TEST(CheckpointDirTest, VerifyFindsTruncatedChangedAndMissingFiles) {
  const std::string dir = Fresh("verify");
  WriteCheckpoint(dir, 1);
  const std::string ckpt = dir + "/step_00000001";
  const std::string file = ckpt + "/model.safetensors";
  EXPECT_TRUE(VerifyCheckpoint(ckpt).ok()) << VerifyCheckpoint(ckpt);

  const std::string original = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  // One byte of the data changed: same size, other checksum.
  std::string changed = original;
  changed.back() ^= 1;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << changed;
  absl::Status s = VerifyCheckpoint(ckpt);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors has CRC-32C"));
  // Truncated.
  fs::resize_file(file, original.size() - 3);
  s = VerifyCheckpoint(ckpt);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("model.safetensors has ", original.size() - 3,
                                                  " bytes, the index recorded ", original.size())));
  // Missing.
  fs::remove(file);
  EXPECT_THAT(VerifyCheckpoint(ckpt).message(), HasSubstr("model.safetensors: "));
  // The file back, the index gone or malformed.
  std::ofstream(file, std::ios::binary | std::ios::trunc) << original;
  EXPECT_TRUE(VerifyCheckpoint(ckpt).ok());
  std::ofstream(ckpt + "/index.json", std::ios::trunc) << "{\"files\": {\"../x\": {\"bytes\": 1, \"crc32c\": 2}}}";
  EXPECT_THAT(VerifyCheckpoint(ckpt).message(), HasSubstr("entry for \"../x\" is malformed"));
  std::ofstream(ckpt + "/index.json", std::ios::trunc) << "{\"files\": ";
  EXPECT_THAT(VerifyCheckpoint(ckpt).message(), HasSubstr("index.json is not valid JSON"));
  fs::remove(ckpt + "/index.json");
  EXPECT_THAT(VerifyCheckpoint(ckpt).message(), HasSubstr("index.json is missing"));
  // An index of the first format (no "files") is accepted.
  std::ofstream(ckpt + "/index.json") << "{\"format\": \"tessera-checkpoint\", \"version\": 1}";
  EXPECT_TRUE(VerifyCheckpoint(ckpt).ok());
}

TEST(CheckpointDirTest, NewestGoodCheckpointSkipsAndSetsAsideDamagedOnes) {
  const std::string dir = Fresh("newest");
  for (int64_t step : {2, 4, 6}) WriteCheckpoint(dir, step);
  fs::resize_file(dir + "/step_00000006/model.safetensors", 10);
  std::ofstream(dir + "/step_00000004/index.json", std::ios::trunc) << "";
  std::vector<absl::Status> damaged;
  auto found = NewestGoodCheckpoint(dir, &damaged);
  ASSERT_TRUE(found.ok()) << found.status();
  auto good = *found;
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->first, 2);
  ASSERT_EQ(damaged.size(), 2u);
  EXPECT_THAT(damaged[0].message(), HasSubstr("step_00000006 is damaged: model.safetensors has 10 bytes"));
  EXPECT_THAT(damaged[1].message(), HasSubstr("step_00000004 is damaged: index.json is not valid JSON"));
  // Set aside: out of the list, kept until the next commit deletes them.
  ASSERT_EQ(ListCheckpoints(dir).size(), 1u);
  EXPECT_TRUE(fs::exists(dir + "/step_00000006.damaged"));
  WriteCheckpoint(dir, 4);
  EXPECT_FALSE(fs::exists(dir + "/step_00000006.damaged"));
  EXPECT_EQ((*NewestGoodCheckpoint(dir, &damaged))->first, 4);

  fs::resize_file(dir + "/step_00000002/model.safetensors", 0);
  fs::resize_file(dir + "/step_00000004/model.safetensors", 0);
  EXPECT_FALSE(NewestGoodCheckpoint(dir, nullptr)->has_value());
}

// A read error at resume (here EMFILE, for real: the process's descriptor limit lowered to what it has
// open) is not damage: the checkpoint is neither set aside nor pruned, and the error says so.
TEST(CheckpointDirTest, AReadErrorIsNotDamage) {
  const std::string dir = Fresh("unreadable");
  WriteCheckpoint(dir, 2);
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  const int next = dup(0);  // The lowest free descriptor: a limit of it leaves none.
  ASSERT_GE(next, 0);
  close(next);
  struct rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(next);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<absl::Status> damaged;
  auto found = NewestGoodCheckpoint(dir, &damaged);
  absl::Status verify = VerifyCheckpoint(dir + "/step_00000002");
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_EQ(found.status().code(), absl::StatusCode::kUnavailable) << found.status();
  EXPECT_THAT(found.status().message(), HasSubstr("not damage"));
  EXPECT_EQ(verify.code(), absl::StatusCode::kUnavailable) << verify;
  EXPECT_TRUE(damaged.empty());
  EXPECT_TRUE(fs::exists(dir + "/step_00000002")) << "kept under its name";
  EXPECT_FALSE(fs::exists(dir + "/step_00000002.damaged"));
  EXPECT_EQ((*NewestGoodCheckpoint(dir, nullptr))->first, 2) << "read again once the error is gone";
}

// The checkpoint directory is the user's: a link loop named like a checkpoint threw
// filesystem_error out of ListCheckpoints (is_directory follows links), which ended the worker that
// lists it on every poll; a step_N that links elsewhere (another job's checkpoint) is not one.
TEST(CheckpointDirTest, LinksNamedLikeCheckpointsAreNotListedAndNeverThrow) {
  const std::string dir = Fresh("links");
  WriteCheckpoint(dir, 2);
  fs::create_symlink("step_00000007", dir + "/step_00000007");  // A loop.
  fs::create_directory_symlink(dir + "/step_00000002", dir + "/step_00000009");
  fs::create_symlink("/nonexistent", dir + "/step_00000011");
  std::vector<std::pair<int64_t, std::string>> listed;
  ASSERT_NO_THROW(listed = ListCheckpoints(dir));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].first, 2);
  std::vector<absl::Status> damaged;
  auto found = NewestGoodCheckpoint(dir, &damaged);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ((*found)->first, 2);
}

TEST(CheckpointDirTest, AFailedCommitDeletesNothing) {
  const std::string dir = Fresh("failed_commit");
  WriteCheckpoint(dir, 2);
  auto tmp = BeginCheckpoint(dir, 4);
  ASSERT_TRUE(tmp.ok());
  AbortCheckpoint(*tmp);
  EXPECT_FALSE(fs::exists(*tmp));
  // Committing a directory that is gone fails, and the older checkpoint stays (keep 1 would prune it).
  EXPECT_FALSE(CommitCheckpoint(dir, *tmp, 4, /*keep=*/1).ok());
  ASSERT_EQ(ListCheckpoints(dir).size(), 1u);
  EXPECT_TRUE(VerifyCheckpoint(dir + "/step_00000002").ok());
}


// A checkpoint of a step written again (a resume from before it): the new one replaces the old one,
// and when it cannot (here: the new one on another file system, so no rename can move it) the old
// one stays. Before: the old one was renamed to step_N.old first and left there, out of
// ListCheckpoints, when the second rename failed — the next commit's clean-up then deleted it.
// The fencing token is asked after the temporary directory's fsync, before the rename, and again
// before the pruning: a superseded writer renames nothing, or (superseded just after its rename)
// prunes nothing.
TEST(CheckpointDirTest, ACommitAsksTheOwnerBeforeTheRenameAndBeforeThePruning) {
  const std::string dir = Fresh("owner");
  for (int64_t step : {2, 4}) WriteCheckpoint(dir, step);
  auto tmp = BeginCheckpoint(dir, 6);
  ASSERT_TRUE(tmp.ok());
  int asked = 0;
  absl::Status s = CommitCheckpoint(dir, *tmp, 6, /*keep=*/1, [&] {
    ++asked;
    return absl::FailedPreconditionError("superseded");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(ListCheckpoints(dir).size(), 2u) << "nothing renamed, nothing pruned";
  asked = 0;
  s = CommitCheckpoint(dir, *tmp, 6, /*keep=*/1, [&] {
    return ++asked == 1 ? absl::OkStatus() : absl::FailedPreconditionError("superseded");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(ListCheckpoints(dir).size(), 3u) << "committed, nothing pruned";
}

TEST(CheckpointDirTest, RecommittingAStepReplacesItOrKeepsTheOldOne) {
  const std::string dir = Fresh("recommit");
  WriteCheckpoint(dir, 2);
  // Again, as a later attempt would: replaced (and nothing left beside it).
  WriteCheckpoint(dir, 2);
  ASSERT_EQ(ListCheckpoints(dir).size(), 1u);
  EXPECT_TRUE(VerifyCheckpoint(dir + "/step_00000002").ok());
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "step_00000002");
  // A new checkpoint of step 2 that cannot be renamed into place.
  const std::string other = "/dev/shm/tessera_recommit_" + std::to_string(getpid());
  fs::remove_all(other);
  auto tmp = BeginCheckpoint(other, 2);
  if (!tmp.ok()) GTEST_SKIP() << "no /dev/shm here: " << tmp.status();
  absl::Status s = CommitCheckpoint(dir, *tmp, 2, /*keep=*/2);
  fs::remove_all(other);
  EXPECT_FALSE(s.ok());
  ASSERT_EQ(ListCheckpoints(dir).size(), 1u) << "the old checkpoint of the step is still there";
  EXPECT_TRUE(VerifyCheckpoint(dir + "/step_00000002").ok());
}

// A writer killed in the middle of a checkpoint (its peer died; its launcher stopped it) leaves its
// temporary directory. Before: it was deleted only after the next commit, so on a nearly full disk
// the next attempt's first checkpoint failed for want of that space, and so did every later one.
TEST(CheckpointDirTest, BeginningACheckpointFreesTheSpaceOfAbandonedOnes) {
  const std::string dir = Fresh("abandoned");
  WriteCheckpoint(dir, 2);
  auto abandoned = BeginCheckpoint(dir, 4, /*token=*/111);
  ASSERT_TRUE(abandoned.ok());
  std::ofstream(*abandoned + "/model.safetensors") << std::string(4096, 'x');
  auto next = BeginCheckpoint(dir, 4, /*token=*/222);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(fs::exists(*abandoned)) << "the abandoned checkpoint's space is freed before writing";
  EXPECT_TRUE(fs::exists(*next));
  EXPECT_TRUE(VerifyCheckpoint(dir + "/step_00000002").ok()) << "committed checkpoints are kept";
}
}  // namespace
}  // namespace tessera::formats::checkpoint
