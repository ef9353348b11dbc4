#pragma once
// The redelivery tracker: a bounded LRU of return counts keyed by (queue, identity), shared by
// all connections. Sharded by key so worker threads rarely contend; O(1) per operation.
// Time is passed in (milliseconds of a steady clock, so that a step of the wall clock expires
// nothing), never read here.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/retry/action.hpp"

namespace nackguard::retry {

// 128 bits of XXH3 over the queue name and the identity: the strings themselves are not kept.
struct TrackerKey {
  std::uint64_t high = 0;
  std::uint64_t low = 0;
  bool operator==(const TrackerKey&) const = default;
};
TrackerKey make_key(std::string_view queue, std::string_view identity);
// 12 hex digits of the key: how log lines and /status name a message without its identity.
std::string short_id(const TrackerKey& key);

struct TrackerEntry {
  std::uint32_t returns = 0;         // returns counted towards the limit
  std::uint32_t window_returns = 0;  // returns within the current rate window
  std::int64_t window_start_ms = 0;  // steady clock
  std::int64_t first_return_ms = 0;  // wall clock, for x-nackguard-first-return
  std::int64_t last_return_ms = 0;   // wall clock, for x-nackguard-last-return
  // The message was unacked when its consumer's channel or connection ended: at its next
  // delivery it is handed out alone, so a second crash names the culprit.
  bool crash_suspect = false;
  // What a crash return decided, carried out at the message's next delivery (forward:
  // nothing pending).
  Action pending_action = Action::forward;
  DeadLetterReason pending_reason = DeadLetterReason::none;
  std::uint32_t pending_delay_ms = 0;
  // Deliveries that ended in a return, counted towards the limit or not (x-nackguard-deliveries).
  std::uint32_t deliveries = 0;
  // The copy of nackguard's whose returns this entry counts (x-nackguard-copy-id; 0: the
  // original). A delivery of another copy finds the entry stale (retry::entry_matches).
  std::uint64_t copy_id = 0;
  // The message went back to the broker since that copy without its return being counted (it
  // was held back in the proxy, the broker connection was lost, an outage held its count): its
  // redelivered flag stands for no return (retry::implied_returns).
  bool uncounted_redelivery = false;
};

// Spends what a crash left pending: nothing waits for the next delivery any more.
inline void clear_pending(TrackerEntry& entry) {
  entry.pending_action = Action::forward;
  entry.pending_reason = DeadLetterReason::none;
  entry.pending_delay_ms = 0;
}

struct TrackerStats {
  std::size_t entries = 0;
  std::uint64_t evictions = 0;  // least recently used entries dropped to stay at max_entries
  std::uint64_t expiries = 0;   // entries dropped after idle_ttl without a return
};

class Tracker {
 public:
  // idle_ttl of zero (or less): entries never expire, only the LRU bound applies.
  Tracker(std::size_t max_entries, std::chrono::milliseconds idle_ttl, std::size_t shards = 16);
  ~Tracker();
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  // Runs `update` on the entry for `key`, creating it (zeroed) if absent or expired, and marks
  // it most recently used. Returns a copy of the entry after the update.
  TrackerEntry upsert(const TrackerKey& key, std::int64_t now_ms,
                      const std::function<void(TrackerEntry&)>& update);
  // The entry, if present and not idle past idle_ttl (an expired one is dropped). Does not
  // change its recency.
  std::optional<TrackerEntry> find(const TrackerKey& key, std::int64_t now_ms);
  // Runs `update` on the entry for `key` if there is one (not expired), without changing its
  // recency; false if there is none.
  bool update_if_present(const TrackerKey& key, std::int64_t now_ms,
                         const std::function<void(TrackerEntry&)>& update);
  // Drops the entry: its message was acked or dead-lettered.
  void erase(const TrackerKey& key);

  TrackerStats stats() const;

  struct Sampled {
    TrackerKey key;
    TrackerEntry entry;
  };
  // For /status: the `n` entries with the most returns (then the latest last return) among
  // the `visit_per_shard` most recently returned of each shard, most first. Each shard's lock
  // is held while at most `visit_per_shard` of its entries are read; expired entries are
  // skipped (not dropped). Sets `*visited` to the entries read.
  std::vector<Sampled> top(std::size_t n, std::size_t visit_per_shard, std::int64_t now_ms,
                           std::size_t* visited = nullptr) const;
  std::size_t max_entries() const { return max_entries_; }

 private:
  struct Shard;
  Shard& shard_for(const TrackerKey& key);

  std::size_t max_entries_;
  std::int64_t idle_ttl_ms_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace nackguard::retry
