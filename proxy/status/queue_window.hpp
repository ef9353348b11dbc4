#pragma once
// Per-queue counts over the last window, for /status: snapshots of the registry's counters
// (which count since start), one every `step`; the oldest snapshot still within `window` is
// the baseline. A snapshot keeps the kMaxWindowQueues busiest queues, so memory is bounded
// whatever metrics.max_queue_labels is; other queues show their totals only.

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "proxy/metrics/registry.hpp"

namespace nackguard::status {

inline constexpr std::size_t kMaxWindowQueues = 1000;

using QueueCounts = metrics::Registry::QueueCounts;

class QueueWindow {
 public:
  // `started_ms`: a steady clock's time at start, the baseline until a snapshot is old enough.
  QueueWindow(std::int64_t started_ms, std::chrono::milliseconds window = std::chrono::minutes(5),
              std::chrono::milliseconds step = std::chrono::seconds(30));

  // Keeps `counts` as a snapshot if `step` has passed since the last one.
  void observe(std::int64_t now_ms, const std::vector<QueueCounts>& counts);

  // The window's length in seconds: since the baseline.
  std::int64_t seconds(std::int64_t now_ms) const;
  // What `current` (counts since start) added since the baseline; nullopt for a queue the
  // baseline snapshot left out (not among the busiest).
  std::optional<QueueCounts> delta(std::int64_t now_ms, const QueueCounts& current) const;

 private:
  struct Snapshot {
    std::int64_t at_ms = 0;
    std::unordered_map<std::string, QueueCounts> queues;
    bool complete = true;  // every queue is in `queues`
  };
  const Snapshot* baseline(std::int64_t now_ms) const;

  std::int64_t started_ms_;
  std::int64_t window_ms_;
  std::int64_t step_ms_;
  std::deque<Snapshot> snapshots_;  // oldest first
};

}  // namespace nackguard::status
