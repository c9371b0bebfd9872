// PromptDataset: rows read back with their rendered text and fields; a damaged or incomplete
// dataset is refused naming the file and the problem.
#include "formats/data/prompt_dataset.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::data {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PromptDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("prompts-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    prefix_ = (dir_ / "p").string();
  }
  void Write(const std::vector<PromptRow>& rows) {
    auto w = PromptDatasetWriter::Create(prefix_, IndexedDtype::kUint16);
    ASSERT_TRUE(w.ok()) << w.status();
    for (const PromptRow& r : rows) ASSERT_TRUE((*w)->Add(r).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  std::string OpenError(int64_t vocab = 16) { return std::string(PromptDataset::Open(prefix_, vocab).status().message()); }
  fs::path dir_;
  std::string prefix_;
};

TEST_F(PromptDatasetTest, RowsComeBackWithTheirTextAndFields) {
  Write({{{1, 2, 3}, "<u>2+2?</u><a>", {{"answer", 4}}}, {{5}, "x\ny", {{"tests", {"a", "b"}}, {"id", "q2"}}}});
  auto ds = PromptDataset::Open(prefix_, 16);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->prompts(), 2);
  auto r0 = (*ds)->Row(0);
  ASSERT_TRUE(r0.ok()) << r0.status();
  EXPECT_THAT(r0->ids, ElementsAre(1, 2, 3));
  EXPECT_EQ(r0->text, "<u>2+2?</u><a>");
  EXPECT_EQ(r0->fields, nlohmann::json({{"answer", 4}}));
  auto r1 = (*ds)->Row(1);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->text, "x\ny");
  EXPECT_EQ(r1->fields["tests"], nlohmann::json({"a", "b"}));
  EXPECT_EQ((*ds)->Row(2).status().code(), absl::StatusCode::kOutOfRange);
  auto small = PromptDataset::Open(prefix_, 3);
  ASSERT_TRUE(small.ok());
  EXPECT_THAT(std::string((*small)->Row(0).status().message()), HasSubstr("token 3 at position 2 of sequence 0"));
}

TEST_F(PromptDatasetTest, AnEmptyPromptIsRefusedAndAnUnfinishedWriterLeavesNothing) {
  {
    auto w = PromptDatasetWriter::Create(prefix_, IndexedDtype::kUint16);
    ASSERT_TRUE(w.ok());
    EXPECT_THAT(std::string((*w)->Add({{}, "", nlohmann::json::object()}).message()), HasSubstr("prompt: has no tokens"));
    EXPECT_THAT(std::string((*w)->Add({{1}, "a", nlohmann::json::array()}).message()), HasSubstr("fields: must be an object"));
    ASSERT_TRUE((*w)->Add({{1}, "a", nlohmann::json::object()}).ok());
  }
  EXPECT_EQ(PromptDataset::Open(prefix_, 16).status().code(), absl::StatusCode::kNotFound);
  for (const auto& entry : fs::directory_iterator(dir_)) ADD_FAILURE() << "left behind: " << entry.path();
}

TEST_F(PromptDatasetTest, ADamagedDatasetIsRefusedNamingTheFile) {
  Write({{{1}, "a", {{"answer", 1}}}, {{2}, "b", {{"answer", 2}}}});
  ASSERT_TRUE(PromptDataset::Open(prefix_, 16).ok());
  const std::string fields = prefix_ + ".fields.jsonl";
  std::string good;
  {
    std::ifstream in(fields);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(fields, std::ios::trunc) << good << "{\"prompt_text\": \"c\"}\n";
  EXPECT_THAT(OpenError(), HasSubstr("holds more lines than the 2 prompts"));
  std::ofstream(fields, std::ios::trunc) << good.substr(0, good.find('\n') + 1);
  EXPECT_THAT(OpenError(), HasSubstr("holds 1 lines for 2 prompts"));
  std::ofstream(fields, std::ios::trunc) << good.substr(0, good.find('\n') + 1) << "{\"prompt_text\": \"cut";
  EXPECT_THAT(OpenError(), HasSubstr("the last line has no newline"));
  std::ofstream(fields, std::ios::trunc) << good.substr(0, good.find('\n') + 1) << "not json\n";
  auto ds = PromptDataset::Open(prefix_, 16);
  ASSERT_TRUE(ds.ok());
  EXPECT_TRUE((*ds)->Row(0).ok());
  EXPECT_THAT(std::string((*ds)->Row(1).status().message()), HasSubstr(".fields.jsonl: line 2: not a JSON object"));
  std::ofstream(fields, std::ios::trunc) << good;
  const std::string json = prefix_ + ".prompts.json";
  std::ofstream(json, std::ios::trunc) << "{\"format\": \"tessera-prompts\", \"version\": 2, \"prompts\": 3, \"tokens\": 2}";
  EXPECT_THAT(OpenError(), HasSubstr("says 3 prompts"));
  std::ofstream(json, std::ios::trunc) << "{\"format\": \"tessera-prompts\", \"version\": 1, \"prompts\": 2, \"tokens\": 2}";
  EXPECT_THAT(OpenError(), HasSubstr("version 1 is not supported (2; prepare it again"));
  std::ofstream(json, std::ios::trunc)
      << "{\"format\": \"tessera-prompts\", \"version\": 2, \"prompts\": 2, \"tokens\": 2, \"stop_token\": 999999}";
  EXPECT_THAT(OpenError(), HasSubstr("stop_token 999999 is not an id below the model's vocabulary"));
  std::ofstream(json, std::ios::trunc) << "[]";
  EXPECT_THAT(OpenError(), HasSubstr("not a prompt dataset's metadata"));
  fs::remove(json);
  EXPECT_THAT(OpenError(), HasSubstr("tessera data prepare --prompts"));
}

}  // namespace
}  // namespace tessera::formats::data
