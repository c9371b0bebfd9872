#include "common/time/clock.h"

#include <time.h>

#include <chrono>
#include <utility>

namespace tessera {
namespace {

class MonotonicClock final : public Clock {
 public:
  explicit MonotonicClock(ClockSources sources)
      : sources_(std::move(sources)), anchor_wall_(sources_.wall()), anchor_steady_(sources_.steady()) {}

  absl::Time Now() const override { return anchor_wall_ + (sources_.steady() - anchor_steady_); }
  absl::Time WallNow() const override { return sources_.wall(); }

 private:
  const ClockSources sources_;
  const absl::Time anchor_wall_;
  const absl::Duration anchor_steady_;
};

ClockSources SystemSources() {
  ClockSources s;
  s.wall = [] { return absl::Now(); };
  // CLOCK_BOOTTIME: monotonic like CLOCK_MONOTONIC, and it also counts time the machine was suspended,
  // so a worker resumed from a suspend sees its lease as old as it really is (CLOCK_MONOTONIC stops
  // while suspended: a suspended worker would resume believing its lease fresh).
  s.steady = [] {
    timespec ts{};
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return absl::Seconds(ts.tv_sec) + absl::Nanoseconds(ts.tv_nsec);
  };
  return s;
}

}  // namespace

Clock* RealClock() {
  static Clock* const clock = NewMonotonicClock(SystemSources()).release();
  return clock;
}

std::unique_ptr<Clock> NewMonotonicClock(ClockSources sources) {
  return std::make_unique<MonotonicClock>(std::move(sources));
}

}  // namespace tessera
