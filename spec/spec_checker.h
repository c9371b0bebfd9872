// Internal to the spec's validation (validate.cc and its parts): collects SpecErrors, each naming
// its field, with the bounds and path checks every part uses.
#ifndef TESSERA_SPEC_SPEC_CHECKER_H_
#define TESSERA_SPEC_SPEC_CHECKER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spec/job_spec.h"
#include "spec/limits.h"

namespace tessera::spec::internal {

class Checker {
 public:
  explicit Checker(std::vector<SpecError>* errors) : errors_(errors) {}

  void Fail(std::string field, std::string message) {
    errors_->push_back({std::move(field), std::move(message)});
  }
  // Records "field: V must be at least MIN" or "field: V exceeds the limit MAX" (docs/security.md,
  // "Bounds") unless min <= value <= max. Returns whether it passed.
  bool InRange(const std::string& field, int64_t value, int64_t min, int64_t max) {
    if (value < min) {
      Fail(field, absl::StrCat(value, " must be at least ", min));
      return false;
    }
    if (value > max) {
      Fail(field, absl::StrCat(value, " exceeds the limit ", max));
      return false;
    }
    return true;
  }
  // A path field: at most kMaxPathBytes bytes, no NUL byte (which would end it early in a C string).
  void Path(const std::string& field, const std::string& value) {
    if (value.size() > limits::kMaxPathBytes) {
      Fail(field, absl::StrCat("is ", value.size(), " bytes long, more than the limit ", limits::kMaxPathBytes));
    } else if (value.find('\0') != std::string::npos) {
      Fail(field, absl::StrCat("contains a NUL byte at offset ", value.find('\0')));
    }
  }

 private:
  std::vector<SpecError>* errors_;
};

}  // namespace tessera::spec::internal

#endif  // TESSERA_SPEC_SPEC_CHECKER_H_
