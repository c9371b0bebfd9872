#include "parallel/data/utf8.h"

#include <cstring>

namespace tessera::parallel {

int64_t FirstInvalidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Fast path: eight ASCII bytes at a time.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // The allowed range of the second byte.
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c == 0xE0) {
      len = 3, lo = 0xA0;  // No overlong three-byte forms.
    } else if (c >= 0xE1 && c <= 0xEC) {
      len = 3;
    } else if (c == 0xED) {
      len = 3, hi = 0x9F;  // No surrogates.
    } else if (c >= 0xEE && c <= 0xEF) {
      len = 3;
    } else if (c == 0xF0) {
      len = 4, lo = 0x90;  // No overlong four-byte forms.
    } else if (c >= 0xF1 && c <= 0xF3) {
      len = 4;
    } else if (c == 0xF4) {
      len = 4, hi = 0x8F;  // Nothing above U+10FFFF.
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return static_cast<int64_t>(i);
    for (size_t k = 2; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
    }
    i += len;
  }
  return -1;
}

}  // namespace tessera::parallel
