#include "parallel/data/token_dataset.h"

#include <cstdio>
#include <fstream>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::parallel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string WriteTokens(const std::string& name, const std::vector<uint16_t>& tokens) {
  std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return path;
}

TEST(TokenDatasetTest, WindowsOverlapByOneAndWrap) {
  std::vector<uint16_t> t(11);
  for (int i = 0; i < 11; ++i) t[i] = i;
  auto ds = TokenDataset::Open({.path = WriteTokens("a.bin", t), .token_bytes = 2, .seq_len = 4, .vocab = 256});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_windows(), 2);  // (11 - 1) / 4.
  std::vector<int64_t> s;
  ASSERT_TRUE((*ds)->Read(1, &s).ok());
  EXPECT_THAT(s, ElementsAre(4, 5, 6, 7, 8));
  s.clear();
  ASSERT_TRUE((*ds)->Read(2, &s).ok());  // Wraps to window 0.
  EXPECT_THAT(s, ElementsAre(0, 1, 2, 3, 4));
}

TEST(TokenDatasetTest, ShuffleIsASeededPermutationPerEpoch) {
  auto p = TokenDataset::Permutation(100, 7);
  EXPECT_EQ(std::set<int64_t>(p.begin(), p.end()).size(), 100u);
  EXPECT_EQ(p, TokenDataset::Permutation(100, 7));
  EXPECT_NE(p, TokenDataset::Permutation(100, 8));
  std::vector<uint16_t> t(401, 1);
  auto ds = TokenDataset::Open({.path = WriteTokens("b.bin", t), .seq_len = 4, .shuffle = true, .seed = 7});
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->WindowOf(3), p[3]);
  EXPECT_EQ((*ds)->WindowOf(103), TokenDataset::Permutation(100, 8)[3]);  // Epoch 1 uses seed + 1.
}

TEST(TokenDatasetTest, BadFilesAreNamedErrors) {
  EXPECT_THAT(TokenDataset::Open({.path = "/nonexistent/x.bin"}).status().message(),
              HasSubstr("cannot open the token file"));
  std::string odd = WriteTokens("odd.bin", {1, 2, 3});
  { std::ofstream(odd, std::ios::app) << 'x'; }
  EXPECT_THAT(TokenDataset::Open({.path = odd, .seq_len = 1}).status().message(),
              HasSubstr("not a multiple of the token size 2"));
  EXPECT_THAT(TokenDataset::Open({.path = WriteTokens("s.bin", {1, 2}), .seq_len = 4}).status().message(),
              HasSubstr("fewer than seq_len + 1 = 5"));
  auto ds = TokenDataset::Open({.path = WriteTokens("v.bin", {1, 300, 2}), .seq_len = 2, .vocab = 256});
  ASSERT_TRUE(ds.ok());
  std::vector<int64_t> s;
  EXPECT_THAT((*ds)->Read(0, &s).message(), HasSubstr("token 300 at position 1 is not below model.vocab 256"));
}

}  // namespace
}  // namespace tessera::parallel
