#include "formats/data/onig_pattern.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::formats::data {
namespace {

struct CodePointRange {
  uint32_t first, last;
};

#include "formats/data/onig_unicode_classes.inc"

std::string Ranges(const CodePointRange* ranges, int count) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    if (ranges[i].first == ranges[i].last) {
      absl::StrAppendFormat(&out, "\\x{%X}", ranges[i].first);
    } else {
      absl::StrAppendFormat(&out, "\\x{%X}-\\x{%X}", ranges[i].first, ranges[i].last);
    }
  }
  return out;
}

// Class bodies (without brackets) equal to Oniguruma's \s, \p{L} and \p{N}.
const std::string& SpaceBody() {
  static const std::string* s = new std::string(Ranges(kOnigSpace, kOnigSpaceCount));
  return *s;
}
const std::string& LetterBody() {
  static const std::string* s = new std::string("\\p{L}" + Ranges(kOnigLetterAdded, kOnigLetterAddedCount));
  return *s;
}
const std::string& NumberBody() {
  static const std::string* s = new std::string("\\p{N}" + Ranges(kOnigNumberAdded, kOnigNumberAddedCount));
  return *s;
}

absl::Status Refuse(std::string_view pattern, size_t at, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("regex '", std::string(pattern), "' at byte ", at, ": ", what, " is not supported"));
}

// Length of the UTF-8 sequence that starts with `c` (1 for a stray continuation byte).
size_t CharLength(unsigned char c) { return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

}  // namespace

absl::StatusOr<std::string> OnigToPcre2(std::string_view p) {
  std::string out;
  bool in_class = false;
  size_t class_start = 0;  // Index in `out` just after the class's '[' (and '^').
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return Refuse(p, i, "a trailing backslash");
      const char e = p[i + 1];
      // \p{L}, \pL, \P{N}, ...: the property's name and whether it is negated.
      if (e == 'p' || e == 'P') {
        size_t end;
        std::string name;
        if (i + 2 < p.size() && p[i + 2] == '{') {
          end = p.find('}', i + 3);
          if (end == std::string_view::npos) return Refuse(p, i, "an unterminated \\p{");
          name = std::string(p.substr(i + 3, end - i - 3));
          ++end;
        } else {
          if (i + 2 >= p.size()) return Refuse(p, i, "a bare \\p");
          name = std::string(1, p[i + 2]);
          end = i + 3;
        }
        const std::string* body = name == "L" ? &LetterBody() : name == "N" ? &NumberBody() : nullptr;
        const bool negated = e == 'P';
        if (body == nullptr) {
          out.append(p.substr(i, end - i));  // Another property: PCRE2's table for it.
        } else if (in_class) {
          if (negated) return Refuse(p, i, "\\P{..} inside a character class");
          out += *body;
        } else {
          absl::StrAppend(&out, negated ? "[^" : "[", *body, "]");
        }
        i = end;
        continue;
      }
      if (e == 's' || e == 'S') {
        if (in_class) {
          if (e == 'S') return Refuse(p, i, "\\S inside a character class");
          out += SpaceBody();
        } else {
          absl::StrAppend(&out, e == 'S' ? "[^" : "[", SpaceBody(), "]");
        }
        i += 2;
        continue;
      }
      if (e == 'h' || e == 'H') return Refuse(p, i, "\\h and \\H (a hex digit in Oniguruma)");
      const size_t n = 1 + CharLength(static_cast<unsigned char>(e));
      out.append(p.substr(i, n));
      i += n;
      continue;
    }
    if (in_class) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') return Refuse(p, i, "a POSIX bracket expression");
        return Refuse(p, i, "a nested character class");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') return Refuse(p, i, "class intersection (&&)");
      if (c == ']' && out.size() > class_start) in_class = false;  // A ']' first in a class is literal.
      out.push_back(c);
      ++i;
      continue;
    }
    out.push_back(c);
    ++i;
    if (c == '[') {
      in_class = true;
      if (i < p.size() && p[i] == '^') out.push_back(p[i++]);
      class_start = out.size();
    }
  }
  if (in_class) return Refuse(p, p.size(), "an unterminated character class");
  return out;
}

}  // namespace tessera::formats::data
