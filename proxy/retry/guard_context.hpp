#pragma once
// What every connection's Guard shares: the policies (replaceable on reload), the redelivery
// tracker, the queues' health, the body budget, the clock, and the listener that turns the
// guard's events into logs and metrics.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "proxy/retry/body_budget.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/fallback.hpp"
#include "proxy/retry/health.hpp"
#include "proxy/retry/learnt_limits.hpp"
#include "proxy/retry/policy_set.hpp"
#include "proxy/retry/queue_facts.hpp"
#include "proxy/retry/tracker.hpp"
#include "proxy/retry/tracker_names.hpp"

namespace nackguard::retry {

// Receives what the guard did, for logs and metrics. Called from worker threads.
class GuardListener {
 public:
  virtual ~GuardListener() = default;
  virtual void on_delivery(std::string_view queue) { (void)queue; }
  // The consumer gave a message back (nack, reject, recover, or a crash).
  virtual void on_return(std::string_view queue) { (void)queue; }
  // What became of a return: forwarded, delayed or dead_lettered.
  virtual void on_requeue(std::string_view queue, Action action) { (void)queue, (void)action; }
  virtual void on_dead_letter(std::string_view queue, std::string_view identity,
                              std::uint32_t returns, DeadLetterReason reason) {
    (void)queue, (void)identity, (void)returns, (void)reason;
  }
  // The proxy could not complete a republish or dead-letter and gave the message back to the
  // broker as the consumer asked. `fallback` says why (never FallbackCause::none), `detail`
  // what happened.
  virtual void on_fallback(std::string_view queue, Fallback fallback, std::string_view detail) {
    (void)queue, (void)fallback, (void)detail;
  }
  virtual void on_outage(std::string_view queue, bool started, double ratio) {
    (void)queue, (void)started, (void)ratio;
  }
  // A consumer held a delivery unacked past its policy's ack_timeout: its channel is closed.
  virtual void on_ack_timeout(std::string_view queue, std::string_view identity,
                              std::int64_t held_ms) {
    (void)queue, (void)identity, (void)held_ms;
  }
  // Something an operator should know once, about a queue nackguard uses for `queue`: e.g. a
  // delay queue that exists with other arguments, used as it is.
  virtual void on_notice(std::string_view queue, std::string_view what) { (void)queue, (void)what; }
};

struct GuardSettings {
  std::size_t tracker_max_entries = 100000;
  std::chrono::milliseconds tracker_idle_ttl{std::chrono::hours(24)};
  std::uint64_t retained_body_bytes = 256ull << 20;
  // A republish or dead-letter whose confirm has not come by then falls back.
  std::chrono::milliseconds confirm_timeout{30000};
  // Queues whose type and declared delivery limit the proxy remembers (QueueFactsRegistry).
  std::size_t max_queue_facts = 10000;
  // Queues whose delivery limit the management API was asked for (LearntLimits), and how
  // often each is asked again; zero: no management API configured, nothing is looked up.
  std::size_t max_learnt_limits = 10000;
  std::chrono::milliseconds learnt_limits_refresh{0};
  // The proxy's host name (the pod name in Kubernetes), for the dead-letters'
  // x-nackguard-consumer; empty leaves it out of the header.
  std::string host_name;
};

// The two clocks the guard reads, in milliseconds. Every duration (confirm deadlines, declare
// retries, the copies-failing window, tracker TTLs, rate and outage windows) is measured on
// `steady`, which never jumps; `wall` (since the epoch) is read only for the timestamps written
// into headers (x-nackguard-first-return, x-nackguard-last-return). An empty function stands
// for std::chrono::steady_clock or system_clock.
struct GuardClocks {
  std::function<std::int64_t()> steady;
  std::function<std::int64_t()> wall;
};

class GuardContext {
 public:
  GuardContext(const GuardSettings& settings, std::shared_ptr<const PolicySet> policies,
               GuardListener* listener = nullptr, GuardClocks clocks = {});

  std::shared_ptr<const PolicySet> policies() const;
  void set_policies(std::shared_ptr<const PolicySet> policies);
  std::uint64_t policies_version() const { return version_.load(std::memory_order_acquire); }

  // For durations and deadlines.
  std::int64_t steady_ms() const { return clocks_.steady(); }
  // For timestamps a person or another program reads; never for a duration.
  std::int64_t wall_ms() const { return clocks_.wall(); }

  // A queue whose copies cannot be published (a declare or publish refused): until `until_ms`
  // (steady_ms) its messages go to the consumer as they would without the proxy, instead of
  // being taken from it and handed back to the broker in a tight loop.
  void mark_copies_failing(const std::string& queue, std::int64_t until_ms);
  bool copies_failing(const std::string& queue, std::int64_t now_ms) const;
  GuardListener& listener() { return *listener_; }
  // Passes `what` to the listener's on_notice the first time `key` is seen (bounded).
  void notice_once(std::string_view key, std::string_view queue, std::string_view what);
  QueueFactsRegistry& queue_facts() { return queue_facts_; }
  LearntLimits& learnt_limits() { return learnt_limits_; }
  Tracker& tracker() { return tracker_; }
  // The names behind the tracker's most recently counted keys, for /status.
  TrackerNames& tracker_names() { return tracker_names_; }
  QueueHealth& health() { return health_; }
  BodyBudget& budget() { return budget_; }
  const GuardSettings& settings() const { return settings_; }

 private:
  GuardSettings settings_;
  mutable std::mutex mutex_;
  std::shared_ptr<const PolicySet> policies_;
  std::unordered_map<std::string, std::int64_t> failing_until_;  // guarded by mutex_
  std::unordered_set<std::string> noticed_;                      // guarded by mutex_
  std::atomic<std::uint64_t> version_{1};
  GuardListener null_listener_;
  GuardListener* listener_;
  GuardClocks clocks_;
  Tracker tracker_;
  TrackerNames tracker_names_;
  QueueHealth health_;
  QueueFactsRegistry queue_facts_;
  LearntLimits learnt_limits_;
  BodyBudget budget_;
};

}  // namespace nackguard::retry
