#pragma once
// Counts the guard's events in the registry, then hands each one on to the next listener (the
// log listener), so one GuardContext listener feeds both.

#include "proxy/metrics/registry.hpp"
#include "proxy/retry/guard_context.hpp"

namespace nackguard::metrics {

class MetricsListener : public retry::GuardListener {
 public:
  // `next` (may be null) receives every event after it is counted; it must outlive this.
  explicit MetricsListener(Registry& registry, retry::GuardListener* next = nullptr)
      : registry_(registry), next_(next) {}

  void on_delivery(std::string_view queue) override;
  void on_return(std::string_view queue) override;
  void on_requeue(std::string_view queue, retry::Action action) override;
  void on_dead_letter(std::string_view queue, std::string_view identity, std::uint32_t returns,
                      retry::DeadLetterReason reason) override;
  void on_fallback(std::string_view queue, retry::Fallback fallback,
                   std::string_view detail) override;
  void on_outage(std::string_view queue, bool started, double ratio) override;
  void on_ack_timeout(std::string_view queue, std::string_view identity,
                      std::int64_t held_ms) override;
  void on_notice(std::string_view queue, std::string_view what) override;

 private:
  Registry& registry_;
  retry::GuardListener* next_;
};

// Points the scrape-time metrics at the context: tracker_entries, tracker_evictions_total,
// tracker_expiries_total, retained_body_bytes and retained_body_bytes_limit. `context` must
// outlive every later Registry::render().
void watch_guard_context(Registry& registry, retry::GuardContext& context);

}  // namespace nackguard::metrics
