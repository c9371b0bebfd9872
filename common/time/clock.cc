#include "common/time/clock.h"

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
  s.steady = [] { return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch()); };
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
