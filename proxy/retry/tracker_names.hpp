#pragma once
// The queue and identity behind the tracker's keys, for /status: the tracker keeps only hashes.
// A bounded LRU (`capacity` names, identities cut to kMaxIdentityBytes) of the messages whose
// returns were counted most recently, shared by all connections. Identities are kept only while
// /status may show them (metrics.show_identities), else only the queue.

#include <atomic>
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "proxy/retry/tracker.hpp"

namespace nackguard::retry {

// Longer identities are cut to this many bytes, and end with "...".
inline constexpr std::size_t kMaxIdentityBytes = 200;

struct TrackerName {
  std::string queue;
  std::string identity;  // empty unless identities are kept
};

class TrackerNames {
 public:
  explicit TrackerNames(std::size_t capacity = 4096) : capacity_(capacity) {}

  // Whether record() keeps identities and find() returns them.
  void set_keep_identities(bool keep) { keep_identities_.store(keep); }
  bool keep_identities() const { return keep_identities_.load(); }

  void record(const TrackerKey& key, std::string_view queue, std::string_view identity);
  std::optional<TrackerName> find(const TrackerKey& key) const;
  std::size_t size() const;
  std::size_t capacity() const { return capacity_; }

 private:
  struct KeyHash {
    std::size_t operator()(const TrackerKey& key) const { return key.low; }
  };
  using Order = std::list<std::pair<TrackerKey, TrackerName>>;

  const std::size_t capacity_;
  std::atomic<bool> keep_identities_{false};
  mutable std::mutex mutex_;
  Order order_;  // most recently recorded first
  std::unordered_map<TrackerKey, Order::iterator, KeyHash> index_;
};

}  // namespace nackguard::retry
