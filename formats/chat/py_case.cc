#include "formats/chat/py_case.h"

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "formats/chat/jinja_budget.h"

namespace tessera::formats::chat {

uint32_t DecodeUtf8At(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    *len = 1;
    return c;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d >> 6) != 2) {
      *len = 1;
      return c;
    }
    cp = (cp << 6) | (d & 0x3f);
  }
  *len = static_cast<size_t>(n);
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

std::string_view PyStrip(std::string_view s, bool left, bool right, const std::string* chars) {
  // The code points of a long `chars` in a set (searching it for each code point of `s` is quadratic).
  absl::flat_hash_set<std::string_view> set;
  if (chars != nullptr && chars->size() > 16) {
    for (size_t i = 0, len = 1; i < chars->size(); i += len) {
      DecodeUtf8At(*chars, i, &len);
      set.insert(std::string_view(*chars).substr(i, len));
    }
  }
  auto in_chars = [&](std::string_view cp) {
    return set.empty() ? chars->find(cp) != std::string::npos : set.contains(cp);
  };
  // One pass: where the first code point kept starts and where the last one kept ends.
  size_t first = std::string_view::npos, last_end = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const uint32_t cp = DecodeUtf8At(s, i, &len);
    const bool strip = chars == nullptr ? IsPySpace(cp) : in_chars(s.substr(i, len));
    if (!strip) {
      if (first == std::string_view::npos) first = i;
      last_end = i + len;
    }
    i += len;
  }
  if (first == std::string_view::npos) return (left || right) ? s.substr(0, 0) : s;
  const size_t b = left ? first : 0, e = right ? last_end : s.size();
  return s.substr(b, e - b);
}

size_t CountCodePoints(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    size_t len = 1;
    DecodeUtf8At(s, i, &len);
    i += len;
  }
  return n;
}

size_t CodePointStart(std::string_view s, size_t index) {
  size_t i = 0;
  for (size_t k = 0; k < index && i < s.size(); ++k) {
    size_t len = 1;
    DecodeUtf8At(s, i, &len);
    i += len;
  }
  return i;
}

std::vector<std::pair<size_t, size_t>> CodePoints(std::string_view s) {
  std::vector<std::pair<size_t, size_t>> out;
  const size_t n = CountCodePoints(s);
  if (!Spend(static_cast<int64_t>(n * sizeof(out[0]) / RenderBudget::kBytesPerStep)).ok()) return out;
  out.reserve(n);
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    DecodeUtf8At(s, i, &len);
    out.push_back({i, i + len});
    i += len;
  }
  return out;
}

namespace {

// Pairs laid out upper, lower, upper, lower, ... from `first` to `last`.
bool InAlternating(uint32_t cp, uint32_t first, uint32_t last) { return cp >= first && cp <= last; }

// The lower-case of an upper-case letter (or cp).
uint32_t Lower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if ((cp >= 0xc0 && cp <= 0xde && cp != 0xd7)) return cp + 32;
  if (cp == 0x178) return 0xff;
  if ((InAlternating(cp, 0x100, 0x137) || InAlternating(cp, 0x14a, 0x177)) && cp % 2 == 0) return cp + 1;
  if ((InAlternating(cp, 0x139, 0x148) || InAlternating(cp, 0x179, 0x17e)) && cp % 2 == 1) return cp + 1;
  if (cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) return cp + 32;
  if (cp == 0x386) return 0x3ac;
  if (cp >= 0x388 && cp <= 0x38a) return cp + 37;
  if (cp == 0x38c) return 0x3cc;
  if (cp == 0x38e || cp == 0x38f) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42f) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40f) return cp + 80;
  if ((InAlternating(cp, 0x460, 0x481) || InAlternating(cp, 0x48a, 0x4bf) || InAlternating(cp, 0x4d0, 0x52f)) &&
      cp % 2 == 0) {
    return cp + 1;
  }
  if (cp >= 0x531 && cp <= 0x556) return cp + 48;
  if ((InAlternating(cp, 0x1e00, 0x1e95) || InAlternating(cp, 0x1ea0, 0x1eff)) && cp % 2 == 0) return cp + 1;
  if (cp >= 0xff21 && cp <= 0xff3a) return cp + 32;
  return cp;
}

// The upper-case of a lower-case letter (or cp); ß is handled by the caller.
uint32_t Upper(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp == 0xb5) return 0x39c;
  if (cp >= 0xe0 && cp <= 0xfe && cp != 0xf7) return cp - 32;
  if (cp == 0xff) return 0x178;
  if (cp == 0x131) return 'I';
  if (cp == 0x17f) return 'S';
  if ((InAlternating(cp, 0x100, 0x137) || InAlternating(cp, 0x14a, 0x177)) && cp % 2 == 1) return cp - 1;
  if ((InAlternating(cp, 0x139, 0x148) || InAlternating(cp, 0x179, 0x17e)) && cp % 2 == 0) return cp - 1;
  if (cp == 0x3c2) return 0x3a3;
  if (cp >= 0x3b1 && cp <= 0x3c9) return cp - 32;
  if (cp == 0x3ac) return 0x386;
  if (cp >= 0x3ad && cp <= 0x3af) return cp - 37;
  if (cp == 0x3cc) return 0x38c;
  if (cp == 0x3cd || cp == 0x3ce) return cp - 63;
  if (cp >= 0x430 && cp <= 0x44f) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45f) return cp - 80;
  if ((InAlternating(cp, 0x460, 0x481) || InAlternating(cp, 0x48a, 0x4bf) || InAlternating(cp, 0x4d0, 0x52f)) &&
      cp % 2 == 1) {
    return cp - 1;
  }
  if (cp >= 0x561 && cp <= 0x586) return cp - 48;
  if ((InAlternating(cp, 0x1e00, 0x1e95) || InAlternating(cp, 0x1ea0, 0x1eff)) && cp % 2 == 1) return cp - 1;
  if (cp >= 0xff41 && cp <= 0xff5a) return cp - 32;
  return cp;
}

bool IsUpperCp(uint32_t cp) { return Lower(cp) != cp; }
bool IsLowerCp(uint32_t cp) { return Upper(cp) != cp || cp == 0xdf; }
bool IsCased(uint32_t cp) { return IsUpperCp(cp) || IsLowerCp(cp); }

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

std::vector<uint32_t> Decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    out.push_back(DecodeUtf8At(s, i, &len));
    i += len;
  }
  return out;
}

void AppendUpper(uint32_t cp, std::string* out) {
  if (cp == 0xdf) {
    *out += "SS";
    return;
  }
  AppendUtf8(Upper(cp), out);
}

// Σ lower-cases to ς at the end of a word (Unicode's Final_Sigma: a cased letter before, none after).
uint32_t LowerAt(const std::vector<uint32_t>& cps, size_t i) {
  if (cps[i] != 0x3a3) return Lower(cps[i]);
  const bool before = i > 0 && IsCased(cps[i - 1]);
  const bool after = i + 1 < cps.size() && IsCased(cps[i + 1]);
  return before && !after ? 0x3c2 : 0x3c3;
}

}  // namespace

std::string PyUpper(std::string_view s) {
  std::string out;
  if (IsAscii(s)) {  // Most text: byte by byte, without decoding.
    out.resize(s.size());
    for (size_t i = 0; i < s.size(); ++i) out[i] = s[i] >= 'a' && s[i] <= 'z' ? static_cast<char>(s[i] - 32) : s[i];
    return out;
  }
  out.reserve(s.size());
  for (uint32_t cp : Decode(s)) AppendUpper(cp, &out);
  return out;
}

std::string PyLower(std::string_view s) {
  std::string out;
  if (IsAscii(s)) {
    out.resize(s.size());
    for (size_t i = 0; i < s.size(); ++i) out[i] = s[i] >= 'A' && s[i] <= 'Z' ? static_cast<char>(s[i] + 32) : s[i];
    return out;
  }
  const auto cps = Decode(s);
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) AppendUtf8(LowerAt(cps, i), &out);
  return out;
}

std::string PyTitle(std::string_view s) {
  const auto cps = Decode(s);
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    if (prev_cased) {
      AppendUtf8(LowerAt(cps, i), &out);
    } else if (cp == 0xdf) {
      out += "Ss";  // ß's title case.
    } else {
      AppendUtf8(Upper(cp), &out);
    }
    prev_cased = IsCased(cp);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  const auto cps = Decode(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      if (cps[0] == 0xdf) {
        out += "Ss";
      } else {
        AppendUtf8(Upper(cps[0]), &out);
      }
    } else {
      AppendUtf8(LowerAt(cps, i), &out);
    }
  }
  return out;
}

bool PyIsUpper(std::string_view s) {
  bool cased = false;
  for (size_t i = 0, len = 1; i < s.size(); i += len) {
    const uint32_t cp = DecodeUtf8At(s, i, &len);
    if (IsLowerCp(cp)) return false;
    cased |= IsUpperCp(cp);
  }
  return cased;
}

bool PyIsLower(std::string_view s) {
  bool cased = false;
  for (size_t i = 0, len = 1; i < s.size(); i += len) {
    const uint32_t cp = DecodeUtf8At(s, i, &len);
    if (IsUpperCp(cp)) return false;
    cased |= IsLowerCp(cp);
  }
  return cased;
}

}  // namespace tessera::formats::chat
