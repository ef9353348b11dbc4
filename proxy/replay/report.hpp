#pragma once
// What `nackguard replay` prints: a progress bar on a terminal while it runs, and the
// summary at the end.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "proxy/replay/replayer.hpp"

namespace nackguard::replay {

struct RunInfo {
  std::string from;
  std::string to;
  std::string endpoint;
  std::string vhost;
  std::int64_t max_replays = 3;
};

// At most this many message ids of each kind are listed; the rest are counted.
inline constexpr std::size_t kMaxListed = 100;

std::string render_summary(const Summary& summary, const RunInfo& info);

// The same content as one JSON document (--format json), for scripts: docs/replay.md lists
// its fields. Every message id is listed (no kMaxListed cut), as are all failures.
std::string render_json(const Summary& summary, const RunInfo& info);

// One line, e.g. "[#######-------] 50/100  moved 48  at ceiling 2  failed 0", where 100 is
// what was looked at plus what the last basic.get-ok said was left.
std::string render_progress(const Summary& summary, std::size_t bar_width = 30);

// Redraws the progress line on a terminal, at most 10 times a second; does nothing when
// disabled (stderr is not a terminal).
class ProgressBar {
 public:
  using Clock = std::chrono::steady_clock;
  ProgressBar(std::ostream& out, bool enabled, std::function<Clock::time_point()> now = Clock::now)
      : out_(out), enabled_(enabled), now_(std::move(now)) {}

  void update(const Summary& summary);
  // Erases the line, so the summary starts on a clean one.
  void finish();

 private:
  std::ostream& out_;
  bool enabled_;
  std::function<Clock::time_point()> now_;
  std::optional<Clock::time_point> last_drawn_;
};

}  // namespace nackguard::replay
