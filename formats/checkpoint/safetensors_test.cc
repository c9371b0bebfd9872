#include "formats/checkpoint/safetensors.h"

#include <filesystem>
#include <fstream>

#include "formats/checkpoint/checkpoint_dir.h"
#include "formats/checkpoint/mapped_safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::checkpoint {
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

TEST(MappedSafetensorsTest, ViewsEachTensorsBytesInPlace) {
  TensorMap in = {{"b", F32({2}, {1, 2})}, {"a.weight", F32({2, 2}, {1, 2, 3, 4})}, {"empty", F32({0, 3}, {})}};
  ASSERT_TRUE(WriteSafetensors(Tmp("m.safetensors"), in, {{"format", "pt"}}).ok());
  auto f = MappedSafetensors::Open(Tmp("m.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  const SafetensorsHeader& h = (*f)->header();
  ASSERT_EQ(h.entries.size(), 3u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  for (const auto& [name, t] : in) {
    const TensorEntry& e = h.entries.at(name);
    EXPECT_EQ(e.shape, t.shape) << name;
    EXPECT_EQ(e.dtype, "F32");
    const char* p = (*f)->data(e);
    EXPECT_EQ(p == nullptr ? std::string() : std::string(p, e.end - e.begin), t.bytes) << name;
  }
}

TEST(MappedSafetensorsTest, RejectsCorruptHeadersWithoutReadingThem) {
  // A header length past the file, one past the format's limit, offsets that overflow, a shape whose
  // byte count overflows 64 bits.
  std::ofstream(Tmp("len.safetensors")) << std::string("\xff\xff\xff\xff\0\0\0\0{}", 10);
  EXPECT_THAT(MappedSafetensors::Open(Tmp("len.safetensors")).status().message(), HasSubstr("exceeds the file"));
  auto header = [](const std::string& json) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
    return s + json;
  };
  std::ofstream(Tmp("off.safetensors"))
      << header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,0]}})");
  EXPECT_THAT(MappedSafetensors::Open(Tmp("off.safetensors")).status().message(), HasSubstr("outside the 0 data bytes"));
  std::ofstream(Tmp("big.safetensors"))
      << header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})");
  EXPECT_THAT(MappedSafetensors::Open(Tmp("big.safetensors")).status().message(), HasSubstr("w: shape is too large"));
  EXPECT_THAT(MappedSafetensors::Open(Tmp("absent.safetensors")).status().message(), HasSubstr("cannot open"));
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
}  // namespace tessera::formats::checkpoint
