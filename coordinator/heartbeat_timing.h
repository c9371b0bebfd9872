// The coordinator's heartbeat timing from its flags (docs/fault-model.md, "The timeouts"): how often
// workers heartbeat, how long a worker's lease lasts, after how long a silent worker is lost, and how
// long a live worker's name is held. The production defaults — interval 5 s, lease 3 intervals
// (15 s), heartbeat timeout lease + 1 interval (20 s) — keep 12,500 workers at 2,500 heartbeats/s
// (bench/RESULTS.md) while a silent worker is still lost within 20 s. Giving only
// --heartbeat_timeout_s keeps the earlier derivation (interval 1 s, lease the timeout less 2 s).
#ifndef TESSERA_COORDINATOR_HEARTBEAT_TIMING_H_
#define TESSERA_COORDINATOR_HEARTBEAT_TIMING_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::coordinator {

struct HeartbeatFlags {
  int interval_ms = -1;  // --heartbeat_interval_ms; -1: 5000 (1000 when timeout_s is given).
  int timeout_s = -1;    // --heartbeat_timeout_s; -1: the lease plus one interval (4 intervals without a lease).
  int lease_ms = -1;     // --worker_lease_ms; -1: 3 intervals (the timeout less 2 s, at least half, when
                         // timeout_s is given); 0: no lease.
};

struct HeartbeatTiming {
  absl::Duration interval, timeout, lease, name_hold;
};

// InvalidArgument naming the flag unless 100 ms <= interval < lease (when there is one) < timeout.
// name_hold: max(3 s, interval + 2 s), below the timeout.
absl::StatusOr<HeartbeatTiming> HeartbeatTimingOf(const HeartbeatFlags& flags);

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_HEARTBEAT_TIMING_H_
