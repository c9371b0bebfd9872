// PreferenceDataset: what the writer writes is read back pair by pair, cut as TRL cuts, and a damaged
// or incomplete dataset is refused with the file and what is wrong.
#include "formats/data/preference_dataset.h"

#include <filesystem>
#include <fstream>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::data {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PreferenceDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("pref-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    prefix_ = (dir_ / "pairs").string();
  }
  void Write(const std::vector<PreferencePair>& pairs, bool margins) {
    auto w = PreferenceDatasetWriter::Create(prefix_, IndexedDtype::kUint16, margins);
    ASSERT_TRUE(w.ok()) << w.status();
    for (const PreferencePair& p : pairs) ASSERT_TRUE((*w)->Add(p).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  fs::path dir_;
  std::string prefix_;
};

TEST_F(PreferenceDatasetTest, PairsAreReadBackInOrderWithTheirMargins) {
  Write({{{1, 2, 3}, {4, 5}, {6}, 0.5}, {{}, {7}, {8, 9, 10}, -1.25}}, /*margins=*/true);
  auto ds = PreferenceDataset::Open(prefix_, /*vocab=*/16);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->pairs(), 2);
  EXPECT_EQ((*ds)->tokens(), 10);
  EXPECT_TRUE((*ds)->has_margins());
  auto p0 = (*ds)->Pair(0);
  ASSERT_TRUE(p0.ok()) << p0.status();
  EXPECT_THAT(p0->prompt, ElementsAre(1, 2, 3));
  EXPECT_THAT(p0->chosen, ElementsAre(4, 5));
  EXPECT_THAT(p0->rejected, ElementsAre(6));
  EXPECT_EQ(p0->margin, 0.5);
  auto p1 = (*ds)->Pair(1);
  ASSERT_TRUE(p1.ok());
  EXPECT_TRUE(p1->prompt.empty());
  EXPECT_EQ(p1->margin, -1.25);
  EXPECT_EQ((*ds)->Pair(2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*ds)->Pair(-1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(PreferenceDatasetTest, ThePromptKeepsItsEndAndCompletionsTheirStart) {
  Write({{{1, 2, 3, 4, 5}, {6, 7, 8}, {9, 10}, 0}}, /*margins=*/false);
  auto ds = PreferenceDataset::Open(prefix_, 16);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_FALSE((*ds)->has_margins());
  auto p = (*ds)->Pair(0, {/*max_prompt=*/2, /*max_completion=*/2});
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->prompt, ElementsAre(4, 5));
  EXPECT_THAT(p->chosen, ElementsAre(6, 7));
  EXPECT_THAT(p->rejected, ElementsAre(9, 10));
  EXPECT_EQ(p->margin, 0);
  auto whole = (*ds)->Pair(0, {/*max_prompt=*/9, /*max_completion=*/0});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->prompt.size(), 5u);
  EXPECT_EQ(whole->chosen.size(), 3u);
}

TEST_F(PreferenceDatasetTest, AnEmptyCompletionIsRefusedAndAnUnfinishedWriterLeavesNoDataset) {
  {
    auto w = PreferenceDatasetWriter::Create(prefix_, IndexedDtype::kUint16, false);
    ASSERT_TRUE(w.ok());
    EXPECT_THAT(std::string((*w)->Add({{1}, {}, {2}, 0}).message()), HasSubstr("chosen: has no tokens"));
    EXPECT_THAT(std::string((*w)->Add({{1}, {2}, {}, 0}).message()), HasSubstr("rejected: has no tokens"));
    ASSERT_TRUE((*w)->Add({{1}, {2}, {3}, 0}).ok());
  }
  EXPECT_EQ(PreferenceDataset::Open(prefix_, 16).status().code(), absl::StatusCode::kNotFound);
  for (const auto& entry : fs::directory_iterator(dir_)) ADD_FAILURE() << "left behind: " << entry.path();
}

TEST_F(PreferenceDatasetTest, ADamagedDatasetIsRefusedNamingTheFileAndTheProblem) {
  Write({{{1}, {2}, {3}, 1.0}, {{4}, {5}, {6}, 2.0}}, /*margins=*/true);
  auto open_error = [&](int64_t vocab = 16) { return std::string(PreferenceDataset::Open(prefix_, vocab).status().message()); };
  ASSERT_TRUE(PreferenceDataset::Open(prefix_, 16).ok());
  // A token outside the model's vocabulary, found when the pair is read.
  {
    auto ds = PreferenceDataset::Open(prefix_, /*vocab=*/5);
    ASSERT_TRUE(ds.ok());
    EXPECT_TRUE((*ds)->Pair(0).ok());
    EXPECT_THAT(std::string((*ds)->Pair(1).status().message()), HasSubstr("pair 1's chosen: token 5 at position 0 is outside the model's vocabulary (5)"));
  }
  const std::string json = prefix_ + ".pref.json";
  std::string good;
  {
    std::ifstream in(json);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto rewrite = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    std::ofstream(json, std::ios::trunc) << text;
  };
  rewrite("\"pairs\": 2", "\"pairs\": 3");
  EXPECT_THAT(open_error(), HasSubstr("says 3 pairs"));
  rewrite("\"pairs\": 2", "\"pairs\": -1");
  EXPECT_THAT(open_error(), HasSubstr("pairs must be a count"));
  rewrite("\"version\": 1", "\"version\": 7");
  EXPECT_THAT(open_error(), HasSubstr("version 7 is not supported"));
  rewrite("\"tokens\": 6", "\"tokens\": 60");
  EXPECT_THAT(open_error(), HasSubstr("does not match the 6 tokens"));
  rewrite("tessera-preference", "tessera-sft");
  EXPECT_THAT(open_error(), HasSubstr("not a preference dataset's metadata"));
  std::ofstream(json, std::ios::trunc) << "{not json";
  EXPECT_THAT(open_error(), HasSubstr("not a preference dataset's metadata"));
  std::ofstream(json, std::ios::trunc) << good;
  fs::resize_file(prefix_ + ".pref.margin", 12);
  EXPECT_THAT(open_error(), HasSubstr("must hold one float64 per pair (16 bytes), holds 12"));
  const double nan = std::numeric_limits<double>::quiet_NaN(), one = 1;
  {
    std::ofstream m(prefix_ + ".pref.margin", std::ios::binary | std::ios::trunc);
    m.write(reinterpret_cast<const char*>(&one), 8).write(reinterpret_cast<const char*>(&nan), 8);
  }
  EXPECT_THAT(open_error(), HasSubstr("pair 1's margin nan is not a finite float32 number"));
  {
    const double huge = 1e300;  // Finite in float64, not in float32 (the loss's type).
    std::ofstream m(prefix_ + ".pref.margin", std::ios::binary | std::ios::trunc);
    m.write(reinterpret_cast<const char*>(&one), 8).write(reinterpret_cast<const char*>(&huge), 8);
  }
  EXPECT_THAT(open_error(), HasSubstr("pair 1's margin 1e+300 is not a finite float32 number"));
  fs::remove(prefix_ + ".pref.margin");
  EXPECT_THAT(open_error(), HasSubstr("says margins: true"));
  fs::resize_file(prefix_ + ".bin", 4);
  EXPECT_THAT(open_error(), HasSubstr(".idx"));
}

}  // namespace
}  // namespace tessera::formats::data
