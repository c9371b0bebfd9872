#include "formats/chat/py_case.h"

#include <cstdint>
#include <vector>

#include "formats/chat/jinja_value.h"

namespace tessera::chat {
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

std::vector<uint32_t> Decode(std::string_view s) {
  std::vector<uint32_t> out;
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
  for (uint32_t cp : Decode(s)) AppendUpper(cp, &out);
  return out;
}

std::string PyLower(std::string_view s) {
  const auto cps = Decode(s);
  std::string out;
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
  for (uint32_t cp : Decode(s)) {
    if (IsLowerCp(cp)) return false;
    cased |= IsUpperCp(cp);
  }
  return cased;
}

bool PyIsLower(std::string_view s) {
  bool cased = false;
  for (uint32_t cp : Decode(s)) {
    if (IsUpperCp(cp)) return false;
    cased |= IsLowerCp(cp);
  }
  return cased;
}

}  // namespace tessera::chat
