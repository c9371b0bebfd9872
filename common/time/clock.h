// Clock: where the control plane reads the time (LevelDB's Env, reduced to the clock). The coordinator
// and the worker agent take one in their options; the daemons use RealClock(), tests a FakeClock
// (fake_clock.h) they advance instead of sleeping.
//
// Two readings, for two purposes:
// - Now(): every deadline of the state machine (heartbeat, lease, fence, adoption, start, backfill,
//   name hold, rank stop grace). Never goes backwards and never jumps: it follows the system's
//   monotonic clock, so an NTP step or a VM resume that moves the wall clock by a minute changes no
//   deadline (otherwise one step larger than the heartbeat timeout would mark every worker lost at once).
//   It reads as an absl::Time near the wall time when the clock was made, so values stay readable.
// - WallNow(): what is shown to people or kept across restarts (job timestamps, "last heartbeat").
// Blocking waits for a network peer (gRPC deadlines, long polls) stay on real time. Thread-safe.
#ifndef TESSERA_COMMON_TIME_CLOCK_H_
#define TESSERA_COMMON_TIME_CLOCK_H_

#include <functional>
#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera {

class Clock {
 public:
  virtual ~Clock() = default;
  // Deadlines: monotonic (see above).
  virtual absl::Time Now() const = 0;
  // Wall time, for people and persisted timestamps; may step either way.
  virtual absl::Time WallNow() const = 0;
  // A moment `t` of Now() as wall time (for showing a deadline-clock time such as a last heartbeat).
  absl::Time ToWall(absl::Time t) const { return WallNow() - (Now() - t); }
};

// The system's clocks: Now() from CLOCK_MONOTONIC anchored at the wall time of the first call, WallNow()
// absl::Now(). Never deleted; shared by every user.
Clock* RealClock();

// Where a monotonic clock reads its two sources (tests replace them to step the wall clock).
struct ClockSources {
  std::function<absl::Time()> wall;         // The system's wall clock.
  std::function<absl::Duration()> steady;   // A monotonic clock's reading since any fixed origin.
};
// A clock as RealClock() over `sources`, anchored when made.
std::unique_ptr<Clock> NewMonotonicClock(ClockSources sources);

}  // namespace tessera

#endif  // TESSERA_COMMON_TIME_CLOCK_H_
