// Job priorities (a spec's scheduling.priority; the coordinator's scheduling policy caps them per
// team): integers in [0, kPriorityMax], higher first in the queue; the names low, normal (the
// default) and high stand for 100, 200 and 300.
#ifndef TESSERA_SPEC_PRIORITY_H_
#define TESSERA_SPEC_PRIORITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::spec {

inline constexpr int kPriorityLow = 100, kPriorityNormal = 200, kPriorityHigh = 300, kPriorityMax = 1000;

// "low", "normal", "high" or an integer in [0, kPriorityMax]; "" is normal. InvalidArgument saying
// what is accepted otherwise.
absl::StatusOr<int> ParsePriority(absl::string_view text);
// "high" for 300, the number otherwise.
std::string PriorityName(int priority);

}  // namespace tessera::spec

#endif  // TESSERA_SPEC_PRIORITY_H_
