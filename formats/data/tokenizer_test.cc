// Unit tests of the tokenizer's parts. Parity with the `tokenizers` library on real corpora is
// tests/python/tokenizer_parity_test.py; these pin the pieces that a corpus rarely reaches.
#include "formats/data/tokenizer.h"

#include <string>

#include "formats/data/byte_level.h"
#include "formats/data/nfc.h"
#include "formats/data/onig_pattern.h"
#include "formats/data/regex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// UAX #15's examples and the cases the composition algorithm must get right; the whole of the
// library's behaviour is compared in tests/python/tokenizer_parity_test.py.
TEST(NfcTest, ComposesReordersAndLeavesStableTextAlone) {
  EXPECT_EQ(Nfc("plain ASCII"), "plain ASCII");
  EXPECT_EQ(Nfc("caf\u00e9 \ud55c\uad6d\uc5b4"), "caf\u00e9 \ud55c\uad6d\uc5b4");  // Already composed.
  EXPECT_EQ(Nfc("cafe\u0301"), "caf\u00e9");                                     // e + acute.
  EXPECT_EQ(Nfc("\u212b"), "\u00c5");                                            // Singleton: Angstrom sign.
  EXPECT_EQ(Nfc("A\u030a"), "\u00c5");
  EXPECT_EQ(Nfc("\u1e0b\u0323"), "\u1e0d\u0307");  // d + dot above + dot below: reordered, below composes.
  EXPECT_EQ(Nfc("q\u0307\u0323"), "q\u0323\u0307");  // No composite: only reordered.
  EXPECT_EQ(Nfc("\u0958"), "\u0915\u093c");           // Composition exclusion: stays decomposed.
  EXPECT_EQ(Nfc("e\u0302\u0301"), "\u1ebf");          // ê then acute: ế.
  EXPECT_EQ(Nfc("a\u0301\u0301"), "\u00e1\u0301");   // The second acute is blocked by the first.
  EXPECT_EQ(Nfc("\u1100\u1161\u11a8"), "\uac01");      // Hangul L + V + T.
  EXPECT_EQ(Nfc("\uac00\u11a8"), "\uac01");             // LV syllable + T.
  EXPECT_EQ(Nfc("\u0344"), "\u0308\u0301");           // A non-starter decomposition.
}

TEST(TokenizerTest, NfcNormalizesBeforeSplittingAndNormalizedAddedTokensMatchAfterIt) {
  // Bytes of "é" (C3 A9) merge to one token; e + U+0301 is normalized to it first. "Å" is an added
  // token matched in the text as given (normalized: false): U+212B becomes Å only after matching.
  const std::string json = R"({"normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "ByteLevel",
      "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
      "added_tokens": [{"id": 300, "content": "\u00c5", "special": false, "normalized": false},
                       {"id": 301, "content": "\u00f1", "special": false}],
      "model": {"type": "BPE", "vocab": {)" + [] {
    std::string v;
    for (int b = 0; b < 256; ++b) {
      const std::string c = ByteLevelEncode(std::string(1, static_cast<char>(b)));
      v += "\"" + (c == "\"" || c == "\\" ? "\\" + c : c) + "\": " + std::to_string(b) + ", ";
    }
    return v;
  }() + R"("\u00c3\u00a9": 256}, "merges": ["\u00c3 \u00a9"]}})";
  auto t = Tokenizer::FromJson(json, "nfc.json");
  ASSERT_TRUE(t.ok()) << t.status();
  auto e = (*t)->NewEncoder();
  std::vector<int32_t> ids;
  ASSERT_TRUE(e->Encode("e\u0301", &ids).ok());
  EXPECT_THAT(ids, ElementsAre(256));
  ids.clear();
  ASSERT_TRUE(e->Encode("\u00c5\u212b", &ids).ok());  // The raw Å matches; U+212B is normalized to Å bytes.
  EXPECT_THAT(ids, ElementsAre(300, 0xC3, 0x85));
  ids.clear();
  ASSERT_TRUE(e->Encode("n\u0303", &ids).ok());  // ñ after normalization: the normalized added token.
  EXPECT_THAT(ids, ElementsAre(301));
}

TEST(ByteLevelTest, IsGpt2sReversibleMap) {
  EXPECT_EQ(ByteLevelChar(' '), "\xC4\xA0");   // 'Ġ' (U+0120).
  EXPECT_EQ(ByteLevelChar('\n'), "\xC4\x8A");  // 'Ċ' (U+010A).
  EXPECT_EQ(ByteLevelChar('a'), "a");
  EXPECT_EQ(ByteLevelChar(0xAD), "\xC5\x83");  // The last remapped byte: U+0143.
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  auto back = ByteLevelDecode(ByteLevelEncode(all));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, all);
  EXPECT_FALSE(ByteLevelDecode("\xE2\x82\xAC").ok());  // '€' is not in the alphabet.
}

TEST(OnigPatternTest, ReplacesOnigurumasClasses) {
  auto p = OnigToPcre2(R"(\s+|[^\s\p{L}]|\pN)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(*p, HasSubstr(R"([\x{9}-\x{D}\x{20}\x{85})"));
  EXPECT_THAT(*p, HasSubstr(R"([^\x{9}-\x{D})"));
  EXPECT_THAT(*p, HasSubstr(R"(\p{L}\x{1C89}-\x{1C8A})"));
  EXPECT_THAT(*p, HasSubstr(R"([\p{N}\x{10D40}-\x{10D49})"));
  for (const char* bad : {R"(\h)", "[[:alpha:]]", "[a-z&&[^b]]", R"([\S])", "[abc", R"(a\)"}) {
    EXPECT_FALSE(OnigToPcre2(bad).ok()) << bad;
  }
  EXPECT_EQ(*OnigToPcre2(R"([]a]\p{Lu}\d)"), R"([]a]\p{Lu}\d)");  // Passed through.
}

TEST(RegexTest, FindsNonOverlappingMatchesAndStepsOverEmptyOnes) {
  auto re = Regex::Compile("a*");
  ASSERT_TRUE(re.ok()) << re.status();
  auto m = (*re)->NewMatcher();
  std::vector<std::pair<size_t, size_t>> spans;
  ASSERT_TRUE(m->FindAll("baa\xC3\xA9" "a", &spans).ok());
  EXPECT_THAT(spans, ElementsAre(std::pair<size_t, size_t>{1, 3}, std::pair<size_t, size_t>{5, 6}));
  EXPECT_FALSE(Regex::Compile("(unclosed").ok());
}

// A tiny tokenizer written by hand: bytes a, b, c, space; merges "a b" then "ab c" then "Ġ a".
std::string TinyJson(const std::string& extra_model = "", const std::string& pre = "") {
  const std::string pre_tokenizer =
      pre.empty() ? R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})" : pre;
  return R"({"normalizer": null, "pre_tokenizer": )" + pre_tokenizer + R"(,
    "added_tokens": [{"id": 7, "content": "<|eot|>", "special": true},
                     {"id": 8, "content": "abc!", "special": false}],
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5, "Ġa": 6, "!": 9})" +
         extra_model + R"(, "merges": ["a b", ["ab", "c"], "Ġ a"]}})";
}

std::vector<int32_t> Ids(const Tokenizer& t, std::string_view text) {
  std::vector<int32_t> ids;
  absl::Status s = t.NewEncoder()->Encode(text, &ids);
  EXPECT_TRUE(s.ok()) << s;
  return ids;
}

TEST(TokenizerTest, MergesByRankAndMatchesOnlyNonSpecialAddedTokens) {
  auto t = Tokenizer::FromJson(TinyJson(), "tiny.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 10);
  EXPECT_THAT(Ids(**t, "abc"), ElementsAre(5));
  // " ab": "a b" (rank 0) wins over "Ġ a" (rank 2), and nothing joins "Ġ" with "ab".
  EXPECT_THAT(Ids(**t, "abc ab"), ElementsAre(5, 3, 4));
  EXPECT_THAT(Ids(**t, " ac"), ElementsAre(6, 2));
  EXPECT_THAT(Ids(**t, "cab!"), ElementsAre(2, 4, 9));
  EXPECT_THAT(Ids(**t, "xabc!c"), ElementsAre(8, 2));      // 'x' is not in the vocabulary: dropped.
  EXPECT_THAT(Ids(**t, "<|eot|>"), ::testing::Not(::testing::Contains(7)));
  EXPECT_THAT(Ids(**t, ""), ElementsAre());
  auto text = (*t)->Decode({5, 3, 8, 7});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "abc abc!<|eot|>");
  EXPECT_FALSE((*t)->Decode({42}).ok());
  EXPECT_EQ((*t)->TokenId("<|eot|>"), 7);
  EXPECT_EQ((*t)->TokenId(" a"), 6);
}

TEST(TokenizerTest, IgnoreMergesTakesWholeWords) {
  // "ab" then "abc" by merges; with ignore_merges a word in the vocabulary is taken whole, even
  // when the merges could not reach it.
  auto t = Tokenizer::FromJson(
      R"({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
          "model": {"vocab": {"a": 0, "b": 1, "ba": 2}, "merges": [], "ignore_merges": true}})",
      "t.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(Ids(**t, "ba"), ElementsAre(2));
  EXPECT_THAT(Ids(**t, "ab"), ElementsAre(0, 1));
}

TEST(TokenizerTest, RefusesInvalidUtf8NamingTheOffset) {
  auto t = Tokenizer::FromJson(TinyJson(), "tiny.json");
  ASSERT_TRUE(t.ok());
  std::vector<int32_t> ids;
  absl::Status s = (*t)->NewEncoder()->Encode("abc\xFF", &ids);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("byte 3: invalid UTF-8"));
}

TEST(TokenizerTest, ErrorsNameTheField) {
  struct Case {
    std::string json, expected;
  };
  const std::vector<Case> cases = {
      {"[1, 2]", "tok.json: not a JSON object"},
      {R"({"pre_tokenizer": {"type": "Metaspace"}, "model": {}})", "pre_tokenizer.type: 'Metaspace' is not supported"},
      {R"({"normalizer": {"type": "NFKC"}, "pre_tokenizer": {"type": "ByteLevel"}, "model": {}})",
       "normalizer: 'NFKC' is not supported"},
      {R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"},
          {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated"}]}, "model": {}})",
       "pre_tokenizer: must end in one ByteLevel step"},
      {R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split",
          "pattern": {"Regex": "(a"}, "behavior": "Isolated"}, {"type": "ByteLevel"}]}, "model": {}})",
       "pre_tokenizer.pretokenizers[0].pattern: regex '(a' at byte 2"},
      {R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split",
          "pattern": {"Regex": "a"}, "behavior": "MergedWithNext"}, {"type": "ByteLevel"}]}, "model": {}})",
       "pretokenizers[0].behavior: 'MergedWithNext' is not supported"},
      {TinyJson(R"(, "byte_fallback": true)"), "model.byte_fallback"},
      {TinyJson(R"(, "dropout": 0.1)"), "model.dropout: must be null"},
      {R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"vocab": {"a": 0}, "merges": ["a b"]}})",
       "model: merge 0 ('a' 'b'): 'b' is not in the vocabulary"},
      {R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"vocab": {"a": -1}, "merges": []}})",
       "model.vocab: token 'a': id -1"},
      {R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"vocab": {"a": 0}, "merges": ["a"]}})",
       "model.merges[0]: 'a' is not two tokens"},
      {R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"vocab": {"a": 0}, "merges": []},
          "added_tokens": [{"id": 1, "content": "x", "lstrip": true}]})",
       "added_tokens[0].lstrip: true is not supported"},
  };
  for (const Case& c : cases) {
    auto t = Tokenizer::FromJson(c.json, "tok.json");
    ASSERT_FALSE(t.ok()) << c.json;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.expected)) << c.json;
  }
}

}  // namespace
}  // namespace tessera::formats::data
