#include "coordinator/heartbeat_timing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera::coordinator {

absl::StatusOr<HeartbeatTiming> HeartbeatTimingOf(const HeartbeatFlags& f) {
  const bool timeout_given = f.timeout_s >= 0;
  HeartbeatTiming t;
  t.interval = absl::Milliseconds(f.interval_ms >= 0 ? f.interval_ms : timeout_given ? 1000 : 5000);
  if (t.interval < absl::Milliseconds(100) || t.interval > absl::Minutes(10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--heartbeat_interval_ms ", f.interval_ms, " must be between 100 and 600000"));
  }
  // Sent to workers in 32-bit milliseconds: an hour at most.
  if (f.timeout_s > 3600 || f.lease_ms > 3600000) {
    return absl::InvalidArgumentError(f.timeout_s > 3600
                                          ? absl::StrCat("--heartbeat_timeout_s ", f.timeout_s, " must be at most 3600")
                                          : absl::StrCat("--worker_lease_ms ", f.lease_ms, " must be at most 3600000"));
  }
  if (f.lease_ms >= 0) {
    t.lease = absl::Milliseconds(f.lease_ms);
  } else if (timeout_given) {
    const absl::Duration timeout = absl::Seconds(f.timeout_s);
    t.lease = std::max(timeout - absl::Seconds(2), timeout / 2);
  } else {
    t.lease = 3 * t.interval;
  }
  if (timeout_given) {
    t.timeout = absl::Seconds(f.timeout_s);
  } else {
    t.timeout = t.lease > absl::ZeroDuration() ? t.lease + t.interval : 4 * t.interval;
  }
  if (t.timeout <= t.interval) {
    return absl::InvalidArgumentError(absl::StrCat("--heartbeat_timeout_s ", absl::FormatDuration(t.timeout),
                                                   " must exceed the heartbeat interval ", absl::FormatDuration(t.interval)));
  }
  if (t.lease > absl::ZeroDuration() && (t.lease <= t.interval || t.lease >= t.timeout)) {
    return absl::InvalidArgumentError(absl::StrCat("--worker_lease_ms ", absl::ToInt64Milliseconds(t.lease),
                                                   " must exceed the heartbeat interval (", absl::FormatDuration(t.interval),
                                                   ") and be below the heartbeat timeout (", absl::FormatDuration(t.timeout),
                                                   "): a reachable worker renews it, a lost one has let it run out"));
  }
  t.name_hold = std::min(std::max(absl::Seconds(3), t.interval + absl::Seconds(2)), t.timeout - absl::Milliseconds(1));
  return t;
}

}  // namespace tessera::coordinator
