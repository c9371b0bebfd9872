// Clock: where the control plane reads the time (LevelDB's Env, reduced to the clock). The coordinator
// and the worker agent take one in their options; the daemons use RealClock(), tests a FakeClock
// (fake_clock.h) they advance instead of sleeping.
//
// Contract: Now() never goes backwards for one Clock. Only deadlines of the state machine (heartbeat,
// adoption, start, backfill, name hold, rank stop grace) are measured on it; blocking waits for a
// network peer (gRPC deadlines, long polls) stay on real time. Thread-safe.
#ifndef TESSERA_COMMON_TIME_CLOCK_H_
#define TESSERA_COMMON_TIME_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The system's clock (absl::Now()). Never deleted; shared by every user.
Clock* RealClock();

}  // namespace tessera

#endif  // TESSERA_COMMON_TIME_CLOCK_H_
