#include "common/text/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace tessera::text {
namespace {

TEST(Utf8Test, FindsTheFirstInvalidByte) {
  EXPECT_EQ(FirstInvalidUtf8(""), -1);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii text, long enough for the fast path"), -1);
  EXPECT_EQ(FirstInvalidUtf8("h\xC3\xA9llo \xF0\x9F\x98\x80"), -1);  // é and an emoji.
  EXPECT_EQ(FirstInvalidUtf8("abc\xC3"), 3);                         // Truncated.
  EXPECT_EQ(FirstInvalidUtf8("abcdefghij\x80"), 10);                 // Stray continuation byte.
  EXPECT_EQ(FirstInvalidUtf8("a\xC0\xAF"), 1);                       // Overlong '/'.
  EXPECT_EQ(FirstInvalidUtf8("a\xE0\x80\xAF"), 1);                   // Overlong three bytes.
  EXPECT_EQ(FirstInvalidUtf8("ab\xED\xA0\x80"), 2);                  // A surrogate.
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x90\x80\x80"), 0);                // Above U+10FFFF.
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x8F\xBF\xBF"), -1);               // U+10FFFF itself.
  EXPECT_EQ(FirstInvalidUtf8(std::string("a\0b", 3)), -1);           // NUL is a character.
}

TEST(Utf8Test, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(Utf8Lossy("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(Utf8Lossy("a\xE2\x82z"), "a\xEF\xBF\xBDz");                   // One replacement for E2 82.
  EXPECT_EQ(Utf8Lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");             // C0 starts nothing.
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");                    // A truncated emoji.
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // A surrogate: three.
}

}  // namespace
}  // namespace tessera::text
