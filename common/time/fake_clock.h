// FakeClock: a Clock that moves only when a test says so. Starts at a fixed time (not the epoch, so
// durations before "now" stay positive). Advance() moves both readings; StepWall() moves only the wall
// clock, either way, as an NTP step or a VM resume does. Thread-safe: the code under test may read it
// on its threads.
#ifndef TESSERA_COMMON_TIME_FAKE_CLOCK_H_
#define TESSERA_COMMON_TIME_FAKE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/time/clock.h"

namespace tessera {

class FakeClock final : public Clock {
 public:
  FakeClock() = default;
  explicit FakeClock(absl::Time start) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  absl::Time WallNow() const override {
    absl::MutexLock lock(&mu_);
    return now_ + wall_offset_;
  }
  // Moves the time forward by `d` (a negative `d` is ignored: the clock never goes backwards).
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    if (d > absl::ZeroDuration()) now_ += d;
  }
  // Steps the wall clock alone by `d` (negative: backwards); Now() does not move.
  void StepWall(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    wall_offset_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1'700'000'000);
  absl::Duration wall_offset_ = absl::ZeroDuration();
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TIME_FAKE_CLOCK_H_
