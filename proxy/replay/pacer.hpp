#pragma once
// --rate: spaces messages at least 1/rate apart. No burst after an idle spell; the clock is
// the caller's, so tests need no sleeping.

#include <algorithm>
#include <chrono>

namespace nackguard::replay {

class RatePacer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RatePacer(double per_second)
      : interval_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(1.0 / per_second))) {}

  // When the next message may go, given `now`; that slot is then taken.
  Clock::time_point take(Clock::time_point now) {
    Clock::time_point slot = started_ ? std::max(next_, now) : now;
    started_ = true;
    next_ = slot + interval_;
    return slot;
  }

 private:
  Clock::duration interval_;
  Clock::time_point next_{};
  bool started_ = false;
};

}  // namespace nackguard::replay
