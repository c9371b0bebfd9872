#include "formats/data/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace tessera::formats::data {
namespace {

struct CombiningClass {
  char32_t code_point;
  uint8_t ccc;
};
struct Decomposition {
  char32_t code_point, first, second;  // second 0: a singleton.
};
struct Composition {
  char32_t first, second, composite;
};

#include "formats/data/nfc_tables.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;

bool IsHangulSyllable(char32_t c) { return c >= kSBase && c < kSBase + kSCount; }

int CombiningClassOf(char32_t c) {
  if (c < 0x300) return 0;
  const auto* end = std::end(kCombiningClasses);
  const auto* it = std::lower_bound(std::begin(kCombiningClasses), end, c,
                                    [](const CombiningClass& e, char32_t v) { return e.code_point < v; });
  return it != end && it->code_point == c ? it->ccc : 0;
}

const Decomposition* DecompositionOf(char32_t c) {
  if (c < 0xC0) return nullptr;
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, c,
                                    [](const Decomposition& e, char32_t v) { return e.code_point < v; });
  return it != end && it->code_point == c ? it : nullptr;
}

uint64_t PairKey(char32_t a, char32_t b) { return (uint64_t{a} << 32) | b; }

// The tables as hash lookups, built once.
struct Tables {
  absl::flat_hash_map<uint64_t, char32_t> compose;
  // Characters after which (or before which) NFC may change the text: non-starters, second halves of
  // a composition (Hangul vowels and trailing consonants included), characters with a decomposition
  // that does not compose back on its own, and composites whose decomposition starts with a second
  // half (which could join the character before).
  absl::flat_hash_set<char32_t> unstable;
};

const Tables& GetTables() {
  static const Tables* tables = [] {
    auto* t = new Tables();
    absl::flat_hash_set<char32_t> seconds;
    for (const Composition& c : kCompositions) {
      t->compose[PairKey(c.first, c.second)] = c.composite;
      seconds.insert(c.second);
    }
    for (char32_t v = kVBase; v < kVBase + kVCount; ++v) seconds.insert(v);
    for (char32_t v = kTBase + 1; v < kTBase + kTCount; ++v) seconds.insert(v);
    t->unstable = seconds;
    for (const CombiningClass& c : kCombiningClasses) t->unstable.insert(c.code_point);
    absl::flat_hash_set<char32_t> composites;
    for (const Composition& c : kCompositions) composites.insert(c.composite);
    for (const Decomposition& d : kDecompositions) {
      char32_t first = d.code_point;
      while (const Decomposition* e = DecompositionOf(first)) first = e->first;
      if (!composites.contains(d.code_point) || seconds.contains(first)) t->unstable.insert(d.code_point);
    }
    return t;
  }();
  return *tables;
}

// Decodes one code point of valid UTF-8 at text[*i], advancing *i.
char32_t Next(std::string_view text, size_t* i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[*i + k]); };
  char32_t c;
  size_t n;
  if (b(0) < 0x80) {
    c = b(0), n = 1;
  } else if (b(0) < 0xE0) {
    c = (b(0) & 0x1F) << 6 | (b(1) & 0x3F), n = 2;
  } else if (b(0) < 0xF0) {
    c = (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F), n = 3;
  } else {
    c = (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F), n = 4;
  }
  *i += n;
  return c;
}

void Append(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | c >> 6));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | c >> 12));
    out->push_back(static_cast<char>(0x80 | (c >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | c >> 18));
    out->push_back(static_cast<char>(0x80 | (c >> 12 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c >> 6 & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

void Decompose(char32_t c, std::vector<char32_t>* out) {
  if (IsHangulSyllable(c)) {
    const char32_t s = c - kSBase;
    out->push_back(kLBase + s / (kVCount * kTCount));
    out->push_back(kVBase + s % (kVCount * kTCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = DecompositionOf(c);
  if (d == nullptr) {
    out->push_back(c);
    return;
  }
  Decompose(d->first, out);
  if (d->second != 0) Decompose(d->second, out);
}

char32_t ComposePair(const Tables& t, char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (IsHangulSyllable(a) && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = t.compose.find(PairKey(a, b));
  return it == t.compose.end() ? 0 : it->second;
}

}  // namespace

std::string Nfc(std::string_view utf8) {
  size_t i = 0;
  while (i < utf8.size() && static_cast<unsigned char>(utf8[i]) < 0x80) ++i;
  if (i == utf8.size()) return std::string(utf8);
  const Tables& t = GetTables();
  bool stable = true;
  for (size_t k = i; k < utf8.size() && stable;) stable = !t.unstable.contains(Next(utf8, &k));
  if (stable) return std::string(utf8);

  std::vector<char32_t> cps;
  cps.reserve(utf8.size());
  for (size_t k = 0; k < utf8.size();) Decompose(Next(utf8, &k), &cps);
  // Canonical ordering: a stable insertion sort of each run of non-starters by class.
  std::vector<uint8_t> ccc(cps.size());
  for (size_t k = 0; k < cps.size(); ++k) ccc[k] = static_cast<uint8_t>(CombiningClassOf(cps[k]));
  for (size_t k = 1; k < cps.size(); ++k) {
    for (size_t j = k; j > 0 && ccc[j] != 0 && ccc[j - 1] > ccc[j]; --j) {
      std::swap(cps[j], cps[j - 1]);
      std::swap(ccc[j], ccc[j - 1]);
    }
  }
  // Composition, in place: out[0, n) is the result so far, `starter` its last starter, `last` the
  // class of the last character kept after that starter (-1: none).
  size_t n = 0;
  int64_t starter = -1;
  int last = -1;
  for (size_t k = 0; k < cps.size(); ++k) {
    const char32_t c = cps[k];
    const int cc = ccc[k];
    if (starter >= 0 && !(last != -1 && last >= cc)) {
      if (const char32_t p = ComposePair(t, cps[starter], c); p != 0) {
        cps[starter] = p;
        continue;
      }
    }
    if (cc == 0) {
      starter = static_cast<int64_t>(n);
      last = -1;
    } else {
      last = cc;
    }
    cps[n++] = c;
  }
  std::string out;
  out.reserve(utf8.size());
  for (size_t k = 0; k < n; ++k) Append(cps[k], &out);
  return out;
}

}  // namespace tessera::formats::data
