#include "formats/data/token_dataset.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include "formats/data/indexed_dataset.h"
#include "formats/data/training_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::data {
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

// 41 tokens, seq_len 4: N = 10 windows. valid_fraction 0.25 holds out floor(2.5) = 2: training reads
// windows 0..7 (shuffled among themselves), validation windows 8, 9 in order and again.
TEST(TokenDatasetTest, HeldOutTailSplitsTheWindows) {
  std::vector<uint16_t> t(41);
  for (int i = 0; i < 41; ++i) t[i] = i;
  const std::string path = WriteTokens("split.bin", t);
  TokenDatasetOptions o{.path = path, .seq_len = 4, .shuffle = true, .seed = 5, .valid_fraction = 0.25};
  o.split = DataSplit::kTrain;
  auto train = TokenDataset::Open(o);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ((*train)->num_windows(), 8);
  const auto p = TokenDataset::Permutation(8, 5);
  std::set<int64_t> seen;
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ((*train)->WindowOf(g), p[g]);
    seen.insert((*train)->WindowOf(g));
  }
  EXPECT_EQ(seen, std::set<int64_t>({0, 1, 2, 3, 4, 5, 6, 7})) << "no validation window is trained on";
  o.split = DataSplit::kValid;
  auto valid = TokenDataset::Open(o);
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_EQ((*valid)->num_windows(), 2);
  EXPECT_EQ((*valid)->first_window(), 8);
  std::vector<int64_t> s;
  for (int g : {0, 1, 2}) ASSERT_TRUE((*valid)->Read(g, &s).ok());  // In order (shuffle ignored), wrapping.
  EXPECT_THAT(s, ElementsAre(32, 33, 34, 35, 36, 36, 37, 38, 39, 40, 32, 33, 34, 35, 36));
  // Too small a share holds out nothing.
  o.valid_fraction = 0.05;
  EXPECT_THAT(TokenDataset::Open(o).status().message(),
              HasSubstr("data.valid_fraction 0.05 of its 10 windows of seq_len + 1 = 5 tokens leaves no validation window"));
  o.split = DataSplit::kTrain;
  o.valid_fraction = 0.95;  // floor(9.5) = 9 held out: one training window is left (f < 1 always leaves one).
  auto one = TokenDataset::Open(o);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->num_windows(), 1);
  o.valid_fraction = 1.5;
  EXPECT_THAT(TokenDataset::Open(o).status().message(), HasSubstr("data.valid_fraction 1.5 is not in (0, 1)"));
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

std::string TmpPath(const std::string& name) {
  return std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
}

std::vector<int64_t> AllSamples(TokenDataset& ds) {
  std::vector<int64_t> out;
  for (int64_t g = 0; g < ds.num_windows(); ++g) EXPECT_TRUE(ds.Read(g, &out).ok());
  return out;
}

TEST(TokenDatasetTest, MegatronDatasetReadsAsTheFlatFileOfItsDocuments) {
  const std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {}, {4, 5, 6, 7, 8, 9}, {10, 11, 12}};
  std::vector<uint16_t> flat;
  const std::string prefix = TmpPath("meg");
  auto w = IndexedDatasetWriter::Create(prefix, IndexedDtype::kUint16);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const auto& d : docs) {
    ASSERT_TRUE((*w)->AddDocument(d).ok());
    flat.insert(flat.end(), d.begin(), d.end());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_FALSE(std::ifstream(prefix + ".bin.tmp").good());
  auto meg = TokenDataset::Open({.path = prefix, .seq_len = 4, .vocab = 256});
  ASSERT_TRUE(meg.ok()) << meg.status();
  EXPECT_EQ((*meg)->format(), DataFormat::kMegatron);
  auto by_bin = TokenDataset::Open({.path = prefix + ".bin", .seq_len = 4, .vocab = 256});
  ASSERT_TRUE(by_bin.ok()) << by_bin.status();
  EXPECT_EQ((*by_bin)->format(), DataFormat::kMegatron);
  auto fl = TokenDataset::Open({.path = WriteTokens("meg_flat.bin", flat), .seq_len = 4, .vocab = 256});
  ASSERT_TRUE(fl.ok());
  EXPECT_EQ((*fl)->format(), DataFormat::kFlat);
  EXPECT_EQ((*meg)->num_tokens(), 12);
  EXPECT_EQ(AllSamples(**meg), AllSamples(**fl));
  // Named explicitly, a flat file is not a Megatron dataset.
  auto wrong = TokenDataset::Open({.path = TmpPath("meg_flat.bin"), .format = DataFormat::kMegatron, .seq_len = 4});
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("no Megatron dataset here"));
}

TEST(TokenDatasetTest, Int32MegatronDatasetAndTheWritersRange) {
  const std::string prefix = TmpPath("meg32");
  auto w = IndexedDatasetWriter::Create(prefix, IndexedDtype::kInt32);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->AddDocument({70000, 1, 2, 3, 4}).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto ds = TokenDataset::Open({.path = prefix, .seq_len = 4, .vocab = 128256});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->token_bytes(), 4);
  std::vector<int64_t> s;
  ASSERT_TRUE((*ds)->Read(0, &s).ok());
  EXPECT_THAT(s, ElementsAre(70000, 1, 2, 3, 4));
  auto w16 = IndexedDatasetWriter::Create(TmpPath("meg16"), IndexedDtype::kUint16);
  ASSERT_TRUE(w16.ok());
  EXPECT_THAT(std::string((*w16)->AddDocument({65536}).message()), HasSubstr("token id 65536 does not fit uint16"));
  w16->reset();  // Abandoned: no temporaries stay.
  EXPECT_FALSE(std::ifstream(TmpPath("meg16.bin.tmp")).good());
  EXPECT_FALSE(std::ifstream(TmpPath("meg16.bin")).good());
}

// Writes an .idx by hand; `mutate` damages the bytes.
std::string IndexBytes(uint8_t code, const std::vector<int32_t>& lengths) {
  std::string b("MMIDIDX\0\0", 9);
  auto put = [&](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  const uint64_t version = 1, seqs = lengths.size(), docs = seqs + 1;
  put(&version, 8);
  put(&code, 1);
  put(&seqs, 8);
  put(&docs, 8);
  put(lengths.data(), 4 * seqs);
  int64_t at = 0;
  for (int32_t len : lengths) {
    put(&at, 8);
    at += len * 2;
  }
  for (int64_t d = 0; d <= static_cast<int64_t>(seqs); ++d) put(&d, 8);
  return b;
}

TEST(TokenDatasetTest, DamagedMegatronIndexesAreRefusedByName) {
  const std::string prefix = TmpPath("bad");
  {
    std::vector<uint16_t> t(20, 1);
    std::ofstream(prefix + ".bin", std::ios::binary).write(reinterpret_cast<const char*>(t.data()), 40);
  }
  struct Case {
    std::string bytes, expected;
  };
  std::string good = IndexBytes(8, {10, 10});
  std::string bad_magic = good, bad_version = good, non_contiguous = good;
  bad_magic[0] = 'X';
  bad_version[9] = 2;
  const int64_t shifted = 2;  // The first pointer moved off byte 0.
  std::memcpy(&non_contiguous[34 + 8], &shifted, 8);
  const std::vector<Case> cases = {
      {bad_magic, "byte 0: not a Megatron index"},
      {bad_version, "byte 9: version 2 is not supported"},
      {IndexBytes(9, {10, 10}), "byte 17: dtype code 9 is not a dtype"},
      {IndexBytes(7, {10, 10}), "dtype float32 cannot hold token ids"},
      {good.substr(0, good.size() - 5), "truncated"},
      {good.substr(0, 20), "the file ends inside the 34-byte header"},
      {IndexBytes(8, {10, 11}), "sequence 1 (11 tokens at byte 20) lies outside the 40-byte .bin file"},
      {IndexBytes(8, {10, -1}), "sequence 1 has negative length -1"},
      {non_contiguous, "sequence 0 starts at byte 2, not 0"},
  };
  for (const Case& c : cases) {
    std::ofstream(prefix + ".idx", std::ios::binary | std::ios::trunc) << c.bytes;
    auto ds = TokenDataset::Open({.path = prefix, .seq_len = 4, .vocab = 256});
    ASSERT_FALSE(ds.ok()) << c.expected;
    EXPECT_THAT(std::string(ds.status().message()), HasSubstr(c.expected));
    EXPECT_THAT(std::string(ds.status().message()), HasSubstr("bad.idx"));
  }
  std::ofstream(prefix + ".idx", std::ios::binary | std::ios::trunc) << good;
  EXPECT_TRUE(TokenDataset::Open({.path = prefix, .seq_len = 4, .vocab = 256}).ok());
}

// An SFT dataset as `tessera data prepare --chat` writes it: the conversations as a Megatron dataset,
// one flag byte per token, and the metadata (docs/data-format.md "SFT datasets").
std::string WriteSft(const std::string& name, const std::vector<std::vector<int32_t>>& convs,
                     const std::vector<std::vector<uint8_t>>& flags) {
  const std::string prefix = TmpPath(name);
  auto w = IndexedDatasetWriter::Create(prefix, IndexedDtype::kUint16);
  EXPECT_TRUE(w.ok()) << w.status();
  std::ofstream mask(prefix + ".sft.mask", std::ios::binary);
  int64_t tokens = 0;
  for (size_t c = 0; c < convs.size(); ++c) {
    EXPECT_TRUE((*w)->AddDocument(convs[c]).ok());
    mask.write(reinterpret_cast<const char*>(flags[c].data()), static_cast<std::streamsize>(flags[c].size()));
    tokens += static_cast<int64_t>(convs[c].size());
  }
  EXPECT_TRUE((*w)->Finish().ok());
  std::ofstream(prefix + ".sft.json") << "{\"format\": \"tessera-sft\", \"version\": 1, \"tokens\": " << tokens << "}";
  return prefix;
}

// An SFT dataset whose conversations hold no trained token (no assistant turn) is refused at the start,
// naming the mask, instead of training "loss 0" to a successful end.
TEST(TokenDatasetTest, ADatasetWithoutATrainedTokenIsRefused) {
  const std::string prefix = WriteSft("sft_untrained", {{1, 2, 3}, {4, 5}}, {{0, 0, 0}, {0, 0}});
  auto ds = TokenDataset::Open({.path = prefix, .seq_len = 2, .vocab = 256});
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ds.status().message(), ::testing::HasSubstr("sft.mask: no token of the dataset is trained"));
}

// Greedy packing in file order into seq_len + 1 = 6 tokens: conversations 0 and 1 (3 + 2 tokens),
// then 2 alone (7 tokens, truncated), then 3. A later conversation's first token is no target; the
// positions restart at each conversation and at the padding.
TEST(TokenDatasetTest, PackingPutsWholeConversationsIntoWindows) {
  const std::string prefix = WriteSft("sft_pack", {{1, 2, 3}, {4, 5}, {6, 7, 8, 9, 10, 11, 12}, {13}},
                                      {{0, 1, 1}, {0, 1}, {1, 1, 1, 1, 1, 1, 1}, {0}});
  auto unpacked = TokenDataset::Open({.path = prefix, .seq_len = 5, .vocab = 256});
  ASSERT_TRUE(unpacked.ok()) << unpacked.status();
  EXPECT_EQ((*unpacked)->num_windows(), 4);
  EXPECT_FALSE((*unpacked)->packed());
  auto ds = TokenDataset::Open({.path = prefix, .seq_len = 5, .vocab = 256, .packing = true});
  ASSERT_TRUE(ds.ok()) << ds.status();
  TokenDataset& d = **ds;
  EXPECT_TRUE(d.packed());
  EXPECT_EQ(d.num_windows(), 3);
  std::vector<int64_t> tokens, positions;
  ASSERT_TRUE(d.Read(0, &tokens, &positions).ok());
  EXPECT_THAT(tokens, ElementsAre(1, 2, 3, -5, 5, -1));  // Token 4 starts conversation 1: untrained.
  EXPECT_THAT(positions, ElementsAre(0, 1, 2, 0, 1, 0));
  EXPECT_EQ(d.TrainedTargets(0), 3);
  tokens.clear(), positions.clear();
  ASSERT_TRUE(d.Read(1, &tokens, &positions).ok());
  EXPECT_THAT(tokens, ElementsAre(6, 7, 8, 9, 10, 11));
  EXPECT_THAT(positions, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(d.TrainedTargets(1), 5);
  tokens.clear(), positions.clear();
  ASSERT_TRUE(d.Read(2, &tokens, &positions).ok());
  EXPECT_THAT(tokens, ElementsAre(13, -1, -1, -1, -1, -1));
  EXPECT_THAT(positions, ElementsAre(0, 0, 1, 2, 3, 4));
  EXPECT_EQ(d.TrainedTargets(2), 0);
  // Packing needs conversations.
  auto flat = TokenDataset::Open({.path = WriteTokens("pack_flat.bin", {1, 2, 3, 4, 5, 6, 7}), .seq_len = 2,
                                  .packing = true});
  EXPECT_THAT(std::string(flat.status().message()), HasSubstr("data.packing: "));
  EXPECT_THAT(std::string(flat.status().message()), HasSubstr("is not an SFT dataset"));
}

// A blend is all SFT datasets (each source's trained targets counted by its own mask) or none.
TEST(TrainingDataTest, BlendsOfConversationsCountTheirSourcesTrainedTargets) {
  const std::string a = WriteSft("sft_blend_a", {{1, 2, 3}}, {{0, 1, 1}});
  const std::string b = WriteSft("sft_blend_b", {{4, 5, 6, 7}}, {{0, 0, 0, 1}});
  const TokenDatasetOptions job{.seq_len = 3, .vocab = 256};
  std::vector<BlendSource> blend(2, BlendSource{job, 1.0});
  blend[0].data.path = a;
  blend[1].data.path = b;
  auto data = TrainingData::Open(job, blend);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_TRUE((*data)->sft());
  for (int64_t g = 0; g < 6; ++g) {
    auto origin = (*data)->Locate(g);
    ASSERT_TRUE(origin.ok());
    auto trained = (*data)->TrainedTargets(g);
    ASSERT_TRUE(trained.ok());
    EXPECT_EQ(*trained, origin->source == 0 ? 2 : 1) << g;
  }
  blend[1].data.path = WriteTokens("blend_stream.bin", {1, 2, 3, 4, 5, 6, 7, 8});
  auto mixed = TrainingData::Open(job, blend);
  EXPECT_THAT(std::string(mixed.status().message()),
              HasSubstr("data.blend[1]: " + blend[1].data.path + " is not an SFT dataset but data.blend[0] is one"));
}

TEST(TokenDatasetTest, LlmcFilesSkipTheirHeader) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = 9;
  const std::string path = TmpPath("llmc.bin");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    for (uint16_t t = 0; t < 9; ++t) out.write(reinterpret_cast<const char*>(&t), 2);
  }
  auto ds = TokenDataset::Open({.path = path, .seq_len = 4, .vocab = 256});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->format(), DataFormat::kLlmc);
  std::vector<int64_t> s;
  ASSERT_TRUE((*ds)->Read(1, &s).ok());
  EXPECT_THAT(s, ElementsAre(4, 5, 6, 7, 8));
  header[2] = 10;  // The header claims more tokens than the file has.
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.write(reinterpret_cast<const char*>(header.data()), 12);
  }
  auto bad = TokenDataset::Open({.path = path, .seq_len = 4, .vocab = 256});
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("the llm.c header says 10 tokens"));
  // As a flat file the same bytes are 521 uint16 tokens.
  auto flat = TokenDataset::Open({.path = path, .format = DataFormat::kFlat, .seq_len = 4, .vocab = 65536});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ((*flat)->num_tokens(), 521);
}

}  // namespace
}  // namespace tessera::formats::data
