#pragma once
// The delivery limits learnt from RabbitMQ's management API, per vhost and queue, for every
// connection's guard; bounded, and behind one mutex. The guard asks (lookup), which also marks a
// queue as wanted when it was never looked up or its answer is older than the refresh
// interval; the fetcher (net::ManagementClient) takes the wanted queues and records what the
// API answered. No I/O, no clock of its own: every call is given the time (steady ms).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "proxy/retry/learnt_limit_rules.hpp"

namespace nackguard::retry {

enum class LookupState : std::uint8_t {
  unknown,    // never looked up, or lookups are off (no management API configured)
  pending,    // wanted or being fetched, nothing known yet
  known,      // limit and source hold what the API last said
  not_found,  // the API answered 404: no such queue (yet); asked again after the refresh
  failed,     // the last lookup failed; limit and source are the last answer's, if any
};
std::string_view to_string(LookupState state);

// What lookup() answers.
struct LearntLimit {
  LookupState state = LookupState::unknown;
  QueueLimit queue;  // type, limit (nullopt: none) and source
  // When the answer `queue` holds came (steady ms); 0 when none came yet.
  std::int64_t fetched_ms = 0;
};

// What a lookup's answer says of the limit in force (broker_delivery_limit's `learnt`): the
// last answer's, known or kept through a failure; nullopt before any came.
std::optional<LimitInForce> in_force(const LearntLimit& learnt);

struct LearntLimitsSettings {
  std::size_t max_queues = 10000;
  // How old an answer may get before a lookup asks again. Zero: lookups are off.
  std::chrono::milliseconds refresh{0};
  // After a failure, asked again this soon (at most `refresh`).
  std::chrono::milliseconds retry_failed{5000};
};

struct QueueKey {
  std::string vhost;
  std::string queue;
  bool operator==(const QueueKey&) const = default;
};

// One queue, for /status.
struct LearntLimitRow {
  QueueKey key;
  LearntLimit limit;
  std::string failure;  // failed: what went wrong
};

// What changed with an answer, for the one log line it may deserve.
struct RecordChange {
  bool recovered = false;       // the lookups of this queue were failing
  bool changed = false;         // the first limit learnt, or another than before
  bool failure_is_new = false;  // a failure of another kind than the last one logged
};

class LearntLimits {
 public:
  explicit LearntLimits(LearntLimitsSettings settings = {});

  bool enabled() const { return settings_.refresh.count() > 0; }
  const LearntLimitsSettings& settings() const { return settings_; }

  // Any worker thread: what is known of the queue. Marks it wanted when it was never looked
  // up, or its last answer is older than the refresh interval (the retry interval after a
  // failure). With lookups off, answers `unknown` and remembers nothing.
  LearntLimit lookup(std::string_view vhost, std::string_view queue, std::int64_t now_ms);

  // The fetcher: up to `max` queues wanted now, oldest wish first; each is then being
  // fetched until one of the record calls below.
  std::vector<QueueKey> take_wanted(std::size_t max, std::int64_t now_ms);
  RecordChange record(const QueueKey& key, const QueueLimit& limit, std::int64_t now_ms);
  // 404: the queue does not exist (yet).
  RecordChange record_not_found(const QueueKey& key, std::int64_t now_ms);
  // No answer to rely on yet (e.g. no statistics): asked again after the retry interval,
  // keeping what is known.
  void record_retry(const QueueKey& key, std::int64_t now_ms);
  // `kind` names the failure for the once-per-kind log line ("http 401", "connect");
  // `what` says what happened, for /status.
  RecordChange record_failure(const QueueKey& key, std::string_view kind, std::string what,
                              std::int64_t now_ms);

  // For /status: up to `max` queues, in the order they were first looked up.
  std::vector<LearntLimitRow> rows(std::size_t max) const;
  std::size_t size() const;
  std::size_t known() const;  // queues whose limit (or lack of one) is known
  std::uint64_t forgotten() const;

 private:
  struct Entry {
    LearntLimit limit;
    std::int64_t next_due_ms = 0;   // when a lookup asks again
    std::int64_t requested_ms = 0;  // when it was taken to be fetched
    bool wanted = false;            // in wanted_
    bool in_flight = false;
    bool knows_limit = false;  // `limit` holds a limit the API gave (not a 404)
    // The failure kinds logged since the last answer (a few at most); empty while it works.
    std::vector<std::string> failure_kinds;
    std::string failure;
  };
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(const std::pair<std::string_view, std::string_view>& key) const;
    std::size_t operator()(const std::pair<std::string, std::string>& key) const {
      return (*this)(std::pair<std::string_view, std::string_view>(key.first, key.second));
    }
  };
  struct KeyEqual {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return std::string_view(a.first) == std::string_view(b.first) &&
             std::string_view(a.second) == std::string_view(b.second);
    }
  };
  using Map = std::unordered_map<std::pair<std::string, std::string>, Entry, KeyHash, KeyEqual>;

  Entry* find(const QueueKey& key);  // with mutex_ held; nullptr when forgotten
  Entry& insert(std::string_view vhost, std::string_view queue);  // with mutex_ held
  bool due(const Entry& entry, std::int64_t now_ms) const;
  // The fetch of `entry` ended; it is due again `after` from now.
  void settle(Entry& entry, std::int64_t now_ms, std::chrono::milliseconds after);
  RecordChange answer(const QueueKey& key, LookupState state, const QueueLimit& limit,
                      std::int64_t now_ms);
  void drop_stale_wishes();

  const LearntLimitsSettings settings_;
  mutable std::mutex mutex_;
  Map entries_;
  std::deque<std::pair<std::string, std::string>> order_;   // first looked up first
  std::deque<std::pair<std::string, std::string>> wanted_;  // may name forgotten queues
  std::uint64_t forgotten_ = 0;
};

}  // namespace nackguard::retry
