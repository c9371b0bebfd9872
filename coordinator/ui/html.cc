#include "coordinator/ui/html.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::coordinator::ui {
namespace {

// Length of the valid UTF-8 sequence at text[i], or 0 if there is none.
size_t Utf8Length(std::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3;
  else if (c >= 0xF0 && c <= 0xF4) n = 4;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  // Overlong forms, surrogates and code points past U+10FFFF.
  if (c == 0xE0 && b(i + 1) < 0xA0) return 0;
  if (c == 0xED && b(i + 1) >= 0xA0) return 0;
  if (c == 0xF0 && b(i + 1) < 0x90) return 0;
  if (c == 0xF4 && b(i + 1) >= 0x90) return 0;
  return n;
}

}  // namespace

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    const size_t n = Utf8Length(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\t':
      case '\n': out += c; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
          out += "\xEF\xBF\xBD";
        } else {
          out += c;
        }
    }
    ++i;
  }
  return out;
}

std::string Number(double v, int digits) {
  if (!std::isfinite(v)) return "\xE2\x80\x93";
  return absl::StrFormat("%.*g", digits, v);
}

std::string Compact(double v) {
  if (!std::isfinite(v)) return "\xE2\x80\x93";
  const double a = std::abs(v);
  if (a >= 1e9) return absl::StrCat(Number(v / 1e9, 3), "G");
  if (a >= 1e6) return absl::StrCat(Number(v / 1e6, 3), "M");
  if (a >= 1e4) return absl::StrCat(Number(v / 1e3, 3), "k");
  return Number(v, 3);
}

std::string Duration(int64_t ms) {
  if (ms < 0) ms = 0;
  const int64_t s = ms / 1000;
  if (s < 60) return absl::StrFormat("%d s", s);
  if (s < 3600) return absl::StrFormat("%d m %02d s", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%d h %02d m", s / 3600, (s / 60) % 60);
  return absl::StrFormat("%d d %02d h", s / 86400, (s / 3600) % 24);
}

}  // namespace tessera::coordinator::ui
