#include "coordinator/ui/html.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/text/utf8.h"

namespace tessera::coordinator::ui {

std::string Escape(std::string_view raw) {
  const std::string valid = text::Utf8Lossy(raw);
  std::string out;
  out.reserve(valid.size() + valid.size() / 8);
  for (const char c : valid) {
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
          out += "\xEF\xBF\xBD";  // A control character.
        } else {
          out += c;
        }
    }
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
