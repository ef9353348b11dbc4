#pragma once
// Outage detection per queue, over a sliding window of rate.window: the share of the distinct
// messages delivered from the queue that were given back. Deliveries and returns are not
// counted as such: a message delivered and returned a thousand times in the window counts
// once on each side, so one poison message on a quiet queue cannot make an outage by itself.
//
// - A queue enters outage when at least min_messages messages were delivered in the window
//   and the share returned is above outage_ratio.
// - It leaves outage (hysteresis, so the log lines do not flap at the threshold) only when the
//   share falls to kLeaveFactor * outage_ratio or below, or fewer than half of min_messages
//   were delivered in the window.
// - After max_outage in outage the queue is `overdue`: its returns count again, so that a
//   queue holding nothing but poison messages cannot delay them for ever.
//
// Shared by all connections; time is passed in (a steady clock's milliseconds).
//
// Distinct messages: a first delivery (not redelivered, no count carried) is a message not
// seen before, and needs no identity. Redeliveries, nackguard's copies and returns are told
// apart by a 64-bit hash of the message's identity, kept per window bucket. The hashes held,
// across all queues, are bounded by `max_messages`; past it a message is counted as if it was
// new (as deliveries were before) and the overflow is counted (HealthStats::messages_dropped).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "proxy/retry/policy.hpp"

namespace nackguard::retry {

// The share of outage_ratio the ratio must fall to before an outage ends.
inline constexpr double kLeaveFactor = 0.8;

struct HealthChange {
  bool outage = false;   // the queue's state after this event
  bool changed = false;  // the state flipped with this event (log it)
  // In outage for max_outage or longer: returns are counted again (decide as if healthy).
  bool overdue = false;
  bool became_overdue = false;  // with this event (log it once)
  double ratio = 0.0;           // messages returned / messages delivered, at most 1
  std::uint64_t messages = 0;   // distinct messages delivered in the window
  std::uint64_t returned = 0;   // distinct messages returned in the window
  std::int64_t outage_ms = 0;   // how long the queue has been in outage
  // Whether returns are to be delayed without counting them.
  bool holds_counts() const { return outage && !overdue; }
};

struct HealthStats {
  std::size_t queues = 0;
  std::size_t messages = 0;              // message hashes held (at most max_messages)
  std::uint64_t messages_dropped = 0;    // not kept because max_messages was reached
  std::uint64_t max_outage_reached = 0;  // outages that lasted max_outage
};

class QueueHealth {
 public:
  // At most `max_queues` queues are tracked (the least recently seen is forgotten beyond that),
  // and at most `max_messages` message hashes across them.
  explicit QueueHealth(std::size_t max_queues = 10000, std::size_t max_messages = 100000);
  ~QueueHealth();
  QueueHealth(const QueueHealth&) = delete;
  QueueHealth& operator=(const QueueHealth&) = delete;

  // A delivery. `message` is the hash of its identity when it may have been delivered before
  // (a redelivery, or a copy nackguard republished); nullopt for a first delivery.
  HealthChange on_delivery(std::string_view queue, const RateLimits& limits, std::int64_t now_ms,
                           std::optional<std::uint64_t> message = std::nullopt);
  // A return of the message whose identity hashes to `message`.
  HealthChange on_return(std::string_view queue, const RateLimits& limits, std::int64_t now_ms,
                         std::uint64_t message);
  // The state at `now_ms` (the window slides even without events), as the next event would
  // find it. It changes nothing: a flip it shows is reported (changed) by the next event.
  HealthChange state(std::string_view queue, const RateLimits& limits, std::int64_t now_ms);
  // Queues currently in outage, for metrics.
  std::vector<std::string> queues_in_outage() const;
  HealthStats stats() const;

 private:
  struct Window;
  enum class Event { delivery, seen_delivery, seen_return };
  HealthChange record(std::string_view queue, const RateLimits& limits, std::int64_t now_ms,
                      Event event, std::uint64_t message);
  // Makes room for one more message hash; false if there is none.
  bool reserve_message(std::int64_t now_ms);

  mutable std::mutex mutex_;
  std::size_t max_queues_;
  std::size_t max_messages_;
  std::size_t messages_ = 0;  // hashes held in all windows
  std::uint64_t messages_dropped_ = 0;
  std::uint64_t max_outage_reached_ = 0;
  std::unordered_map<std::string, std::unique_ptr<Window>> windows_;
  // Windows on an intrusive recency list (head = most recently seen), so that forgetting the
  // least recently seen queue is O(1).
  Window* recent_head_ = nullptr;
  Window* recent_tail_ = nullptr;
  Window& touch(std::string_view queue);
  void forget_least_recent();
};

}  // namespace nackguard::retry
