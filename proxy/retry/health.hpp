#pragma once
// Outage detection per queue: returns / deliveries over a sliding window. A queue is in outage
// while the ratio is above outage_ratio with at least min_deliveries seen in the window; it
// leaves outage when the ratio falls to outage_ratio or below (or deliveries drop below the
// minimum). Shared by all connections; time is passed in.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "proxy/retry/policy.hpp"

namespace nackguard::retry {

struct HealthChange {
  bool outage = false;   // the queue's state after this event
  bool changed = false;  // the state flipped with this event (log it)
  double ratio = 0.0;    // returns / deliveries in the window
  std::uint64_t deliveries = 0;
  std::uint64_t returns = 0;
};

class QueueHealth {
 public:
  // At most `max_queues` queues are tracked; the least recently seen is forgotten beyond that.
  explicit QueueHealth(std::size_t max_queues = 10000);

  HealthChange on_delivery(std::string_view queue, const RateLimits& limits, std::int64_t now_ms);
  HealthChange on_return(std::string_view queue, const RateLimits& limits, std::int64_t now_ms);
  // The current state, re-evaluated at `now_ms` (the window slides even without events).
  HealthChange state(std::string_view queue, const RateLimits& limits, std::int64_t now_ms);
  // Queues currently in outage, for metrics.
  std::vector<std::string> queues_in_outage() const;

 private:
  struct Window;
  HealthChange record(std::string_view queue, const RateLimits& limits, std::int64_t now_ms,
                      std::uint32_t deliveries, std::uint32_t returns);

  mutable std::mutex mutex_;
  std::size_t max_queues_;
  std::unordered_map<std::string, std::shared_ptr<Window>> windows_;
  std::uint64_t clock_ = 0;  // for forgetting the least recently seen queue
  // Windows on an intrusive recency list (head = most recently seen), so that forgetting the
  // least recently seen queue is O(1).
  Window* recent_head_ = nullptr;
  Window* recent_tail_ = nullptr;
  Window& touch(std::string_view queue);
  void forget_least_recent();
};

}  // namespace nackguard::retry
