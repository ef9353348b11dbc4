#pragma once
// How long something has waited by the session's clock (on_tick's readings): dated when it
// starts, or at the next tick when it starts before the clock's first reading (-1). The held
// closes' bounds, a gone client's, and the client's socket after its close-ok count this way.

#include <cstdint>

namespace nackguard::session {

class Waited {
 public:
  void start(std::int64_t now_ms) { since_ms_ = now_ms; }
  // True once it has waited `bound_ms`. An undated wait is dated now.
  bool past(std::int64_t now_ms, std::int64_t bound_ms) {
    if (since_ms_ < 0) since_ms_ = now_ms;
    return now_ms - since_ms_ >= bound_ms;
  }

 private:
  std::int64_t since_ms_ = -1;
};

}  // namespace nackguard::session
