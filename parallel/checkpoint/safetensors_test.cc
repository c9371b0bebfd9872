#include "parallel/checkpoint/safetensors.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/checkpoint/checkpoint_dir.h"

namespace tessera::parallel {
namespace {

using ::testing::HasSubstr;

std::string Tmp(const std::string& name) {
  return std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
}

RawTensor F32(std::vector<int64_t> shape, std::vector<float> values) {
  RawTensor t{"F32", shape, std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4)};
  return t;
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  TensorMap in = {{"b", F32({2}, {1, 2})}, {"a.weight", F32({2, 2}, {1, 2, 3, 4})}};
  ASSERT_TRUE(WriteSafetensors(Tmp("x.safetensors"), in, {{"format", "pt"}}).ok());
  std::map<std::string, std::string> meta;
  auto out = ReadSafetensors(Tmp("x.safetensors"), &meta);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ(out->at("a.weight").bytes, in.at("a.weight").bytes);
  EXPECT_EQ(out->at("a.weight").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(meta.at("format"), "pt");
  // Header length is a multiple of 8 so data is aligned.
  std::ifstream f(Tmp("x.safetensors"), std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(SafetensorsTest, CorruptFilesAreNamedErrors) {
  TensorMap in = {{"w", F32({4}, {1, 2, 3, 4})}};
  ASSERT_TRUE(WriteSafetensors(Tmp("t.safetensors"), in).ok());
  std::filesystem::resize_file(Tmp("t.safetensors"), std::filesystem::file_size(Tmp("t.safetensors")) - 4);
  EXPECT_THAT(ReadSafetensors(Tmp("t.safetensors")).status().message(), HasSubstr("truncated file?"));
  std::ofstream(Tmp("g.safetensors")) << "garbage";
  EXPECT_THAT(ReadSafetensors(Tmp("g.safetensors")).status().message(), HasSubstr("shorter than its 8-byte header"));
  std::ofstream(Tmp("h.safetensors")) << std::string("\x05\0\0\0\0\0\0\0{abc}", 13);
  EXPECT_THAT(ReadSafetensors(Tmp("h.safetensors")).status().message(), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(WriteSafetensors(Tmp("bad.safetensors"), {{"w", F32({5}, {1, 2})}}).message(),
              HasSubstr("8 bytes for 5 elements"));
}

TEST(CheckpointDirTest, CommitIsAtomicAndKeepsNewest) {
  const std::string dir = Tmp("ckpt");
  for (int step : {5, 10, 15}) {
    auto tmp = BeginCheckpoint(dir, step);
    ASSERT_TRUE(tmp.ok());
    EXPECT_TRUE(ListCheckpoints(dir).size() <= 2u);  // The temporary one is not listed.
    std::ofstream(*tmp + "/x") << step;
    ASSERT_TRUE(CommitCheckpoint(dir, *tmp, step, /*keep=*/2).ok());
  }
  auto all = ListCheckpoints(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 10);
  EXPECT_EQ(all[1].first, 15);
  EXPECT_EQ(std::filesystem::path(all[1].second).filename(), "step_00000015");
}

}  // namespace
}  // namespace tessera::parallel
