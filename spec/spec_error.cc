#include "spec/spec_error.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::spec {

std::string SpecError::ToString() const {
  return field.empty() ? message : absl::StrCat(field, ": ", message);
}

std::string Quote(absl::string_view value, size_t max) {
  if (value.size() <= max) return absl::StrCat("'", value, "'");
  return absl::StrCat("'", value.substr(0, max), "…' (", value.size(), " characters)");
}

std::string NameProblem(absl::string_view name) {
  if (name.empty()) return "is required";
  if (name.size() > 128) return absl::StrCat(Quote(name, 32), " is longer than 128 characters");
  for (char c : name) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return absl::StrCat(Quote(name), " may use only letters, digits, '-', '_' and '.'");
    }
  }
  return "";
}

absl::Status ToStatus(const std::vector<SpecError>& errors) {
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(
      errors, "\n", [](std::string* out, const SpecError& e) { out->append(e.ToString()); }));
}

}  // namespace tessera::spec
