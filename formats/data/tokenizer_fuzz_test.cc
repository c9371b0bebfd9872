// The fuzz property (tokenizer_fuzz.h) on seeded random inputs: random bytes, random valid UTF-8 over
// all planes, and random mixes of the characters the pre-tokenizer's classes care about. The
// coverage-guided run is tools/fuzz.sh tokenizer (libFuzzer, on demand).
#include <random>
#include <string>

#include "formats/data/tokenizer_fuzz.h"
#include "gtest/gtest.h"

namespace tessera::formats::data {
namespace {

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

TEST(TokenizerFuzzTest, RandomBytesAreRefusedOrRoundTrip) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    ASSERT_EQ(CheckTokenizerOn(s), "") << "input " << i;
  }
}

TEST(TokenizerFuzzTest, RandomValidUtf8RoundTrips) {
  std::mt19937_64 rng(2);
  const std::vector<std::string> pieces = {" ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "the", " the", "<tool>",
                                           "<|eot|>", "123456", "\xC2\xA0", "\xE3\x80\x80", "\xC2\x85", "x"};
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 48);
    for (int k = 0; k < n; ++k) {
      const uint64_t r = rng() % 10;
      if (r < 4) {
        s += pieces[rng() % pieces.size()];
      } else {
        uint32_t cp = r < 7 ? rng() % 0x800 : r < 9 ? rng() % 0x10000 : rng() % 0x110000;
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
        s += Utf8(cp);
      }
    }
    ASSERT_EQ(CheckTokenizerOn(s), "") << "input " << i;
  }
}

TEST(TokenizerFuzzTest, LongRunsDoNotExhaustTheRegex) {
  // One piece of 1 MB whitespace (the \s+(?!\S) backtracking case) and of one letter.
  EXPECT_EQ(CheckTokenizerOn(std::string(1 << 20, ' ') + "x"), "");
  EXPECT_EQ(CheckTokenizerOn(std::string(1 << 20, 'a')), "");
  EXPECT_EQ(CheckTokenizerOn(std::string(1 << 18, '\n') + std::string(1 << 18, ' ')), "");
}

}  // namespace
}  // namespace tessera::formats::data
