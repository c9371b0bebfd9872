// One problem found in a job spec, named by its field path ("parallel.tp") and a reason.
#ifndef TESSERA_SPEC_SPEC_ERROR_H_
#define TESSERA_SPEC_SPEC_ERROR_H_

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"

namespace tessera::spec {

struct SpecError {
  std::string field;    // Dotted path from the top of the spec, e.g. "train.global_batch".
  std::string message;  // Why the value is wrong, e.g. "6 is not a multiple of micro_batch×dp = 4".

  // "field: message".
  std::string ToString() const;
};

// `value` in single quotes for an error message, cut to at most `max` characters ("…" marks a cut):
// errors must not echo megabytes of bad input back.
std::string Quote(absl::string_view value, size_t max = 64);

// Names of jobs, workers and worker pools: 1–128 letters, digits, '-', '_' and '.'. NameProblem says
// what is wrong with `name` ("" when nothing is).
std::string NameProblem(absl::string_view name);

// OK when `errors` is empty; otherwise InvalidArgument whose message has one "field: message" per line.
absl::Status ToStatus(const std::vector<SpecError>& errors);

}  // namespace tessera::spec

#endif  // TESSERA_SPEC_SPEC_ERROR_H_
