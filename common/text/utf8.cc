#include "common/text/utf8.h"

#include <algorithm>
#include <cstring>

namespace tessera::text {

namespace {

// The length of the sequence `lead` starts and the allowed range of its second byte; 0 if `lead`
// starts none.
size_t SequenceOf(unsigned char lead, unsigned char* lo, unsigned char* hi) {
  *lo = 0x80, *hi = 0xBF;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead == 0xE0) return *lo = 0xA0, 3;  // No overlong three-byte forms.
  if (lead >= 0xE1 && lead <= 0xEC) return 3;
  if (lead == 0xED) return *hi = 0x9F, 3;  // No surrogates.
  if (lead >= 0xEE && lead <= 0xEF) return 3;
  if (lead == 0xF0) return *lo = 0x90, 4;  // No overlong four-byte forms.
  if (lead >= 0xF1 && lead <= 0xF3) return 4;
  if (lead == 0xF4) return *hi = 0x8F, 4;  // Nothing above U+10FFFF.
  return 0;
}

// How many bytes of the sequence at `s[i]` are well-formed (== its length when it is complete).
size_t WellFormedPrefix(const unsigned char* s, size_t n, size_t i) {
  unsigned char lo, hi;
  const size_t len = SequenceOf(s[i], &lo, &hi);
  if (len <= 1) return len;
  if (i + 1 >= n || s[i + 1] < lo || s[i + 1] > hi) return 1;
  size_t k = 2;
  while (k < len && i + k < n && (s[i + k] & 0xC0) == 0x80) ++k;
  return k;
}

}  // namespace

std::string Utf8Lossy(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n;) {
    unsigned char lo, hi;
    const size_t len = SequenceOf(s[i], &lo, &hi);
    const size_t good = WellFormedPrefix(s, n, i);
    if (len != 0 && good == len) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal subpart (at least one byte).
      i += std::max<size_t>(good, 1);
    }
  }
  return out;
}

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
    unsigned char lo, hi;
    const size_t len = SequenceOf(s[i], &lo, &hi);
    if (len == 1) {
      ++i;
      continue;
    }
    if (len == 0 || i + len > n || s[i + 1] < lo || s[i + 1] > hi) return static_cast<int64_t>(i);
    for (size_t k = 2; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
    }
    i += len;
  }
  return -1;
}

}  // namespace tessera::text
