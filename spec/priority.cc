#include "spec/priority.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "spec/spec_error.h"

namespace tessera::spec {

absl::StatusOr<int> ParsePriority(absl::string_view text) {
  if (text.empty() || text == "normal") return kPriorityNormal;
  if (text == "low") return kPriorityLow;
  if (text == "high") return kPriorityHigh;
  int v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > kPriorityMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quote(text), " is not low, normal, high or an integer from 0 to ", kPriorityMax));
  }
  return v;
}

std::string PriorityName(int priority) {
  if (priority == kPriorityLow) return "low";
  if (priority == kPriorityNormal) return "normal";
  if (priority == kPriorityHigh) return "high";
  return absl::StrCat(priority);
}

}  // namespace tessera::spec
