#include "formats/data/byte_level.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace tessera::formats::data {
namespace {

std::string Utf8Of(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {  // The alphabet stays below U+0800.
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

bool PrintsAsItself(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

struct Alphabet {
  std::array<std::string, 256> chars;
  std::array<int, 512> byte_of;  // Code point (< 512) -> byte, or -1.
  Alphabet() {
    byte_of.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = PrintsAsItself(b) ? b : next++;
      chars[b] = Utf8Of(cp);
      byte_of[cp] = b;
    }
  }
};

const Alphabet& TheAlphabet() {
  static const Alphabet* alphabet = new Alphabet();
  return *alphabet;
}

}  // namespace

const std::string& ByteLevelChar(unsigned char b) { return TheAlphabet().chars[b]; }

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += TheAlphabet().chars[b];
  return out;
}

absl::StatusOr<std::string> ByteLevelDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto& a = TheAlphabet();
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c, i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu), i += 2;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("byte ", i, " of '", std::string(text), "' is outside the byte-level alphabet"));
    }
    if (cp >= a.byte_of.size() || a.byte_of[cp] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("'", std::string(text), "' holds U+", absl::Hex(cp),
                                                     ", outside the byte-level alphabet"));
    }
    out.push_back(static_cast<char>(a.byte_of[cp]));
  }
  return out;
}

}  // namespace tessera::formats::data
