#include "proxy/metrics/metrics_listener.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace nackguard::metrics {
namespace {

class RecordingListener : public retry::GuardListener {
 public:
  void on_delivery(std::string_view queue) override { events.push_back("delivery " + s(queue)); }
  void on_return(std::string_view queue) override { events.push_back("return " + s(queue)); }
  void on_requeue(std::string_view queue, retry::Action action) override {
    events.push_back("requeue " + s(queue) + " " + s(retry::to_string(action)));
  }
  void on_dead_letter(std::string_view queue, std::string_view identity, std::uint32_t returns,
                      retry::DeadLetterReason reason) override {
    events.push_back("dead_letter " + s(queue) + " " + s(identity) + " " + std::to_string(returns) +
                     " " + s(retry::to_string(reason)));
  }
  void on_fallback(std::string_view queue, retry::Fallback fallback,
                   std::string_view detail) override {
    events.push_back("fallback " + s(queue) + " " + s(retry::to_string(fallback.cause)) +
                     (fallback.at_broker_limit ? " at_broker_limit " : " ") + s(detail));
  }
  void on_outage(std::string_view queue, bool started, double ratio) override {
    events.push_back("outage " + s(queue) + " " + (started ? "start " : "end ") +
                     std::to_string(ratio));
  }

  std::vector<std::string> events;

 private:
  static std::string s(std::string_view v) { return std::string(v); }
};

bool has_line(const std::string& page, const std::string& line) {
  return page.find("\n" + line + "\n") != std::string::npos;
}

void send_every_event(retry::GuardListener& listener) {
  listener.on_delivery("orders");
  listener.on_return("orders");
  listener.on_requeue("orders", retry::Action::delay);
  listener.on_dead_letter("orders", "msg-1", 6, retry::DeadLetterReason::crash_loop);
  listener.on_fallback("orders", {retry::FallbackCause::republish_failed, false},
                       "the broker nacked the copy");
  listener.on_outage("orders", true, 0.75);
}

TEST(MetricsListener, CountsEveryEventAndForwardsItUnchanged) {
  Registry registry;
  RecordingListener next;
  MetricsListener listener(registry, &next);
  send_every_event(listener);

  EXPECT_EQ(next.events, (std::vector<std::string>{
                             "delivery orders",
                             "return orders",
                             "requeue orders delay",
                             "dead_letter orders msg-1 6 crash_loop",
                             "fallback orders republish_failed the broker nacked the copy",
                             "outage orders start 0.750000",
                         }));
  const std::string page = registry.render();
  EXPECT_TRUE(has_line(page, R"(nackguard_deliveries_total{queue="orders"} 1)"));
  EXPECT_TRUE(has_line(page, R"(nackguard_returns_total{queue="orders"} 1)"));
  EXPECT_TRUE(has_line(page, R"(nackguard_requeues_total{queue="orders",action="delayed"} 1)"));
  EXPECT_TRUE(
      has_line(page, R"(nackguard_dead_letters_total{queue="orders",reason="crash_loop"} 1)"));
  EXPECT_TRUE(
      has_line(page, R"(nackguard_fallbacks_total{queue="orders",cause="republish_failed"} 1)"));
  EXPECT_TRUE(has_line(page, R"(nackguard_outage{queue="orders"} 1)"));
  EXPECT_TRUE(has_line(page, "nackguard_returns_before_dead_letter_sum 6"));

  listener.on_outage("orders", false, 0.1);
  EXPECT_TRUE(has_line(registry.render(), R"(nackguard_outage{queue="orders"} 0)"));
}

TEST(MetricsListener, WorksWithoutANextListener) {
  Registry registry;
  MetricsListener listener(registry);
  send_every_event(listener);
  EXPECT_TRUE(has_line(registry.render(), R"(nackguard_deliveries_total{queue="orders"} 1)"));
}

TEST(WatchGuardContext, ReadsTrackerAndBudgetAtScrapeTime) {
  retry::GuardSettings settings;
  settings.tracker_max_entries = 1;  // one shard: evictions are deterministic
  settings.retained_body_bytes = 1000;
  retry::GuardContext context(settings, nullptr);
  Registry registry;
  watch_guard_context(registry, context);

  std::string page = registry.render();
  EXPECT_TRUE(has_line(page, "nackguard_tracker_entries 0"));
  EXPECT_TRUE(has_line(page, "nackguard_tracker_evictions_total 0"));
  EXPECT_TRUE(has_line(page, "nackguard_tracker_expiries_total 0"));
  EXPECT_TRUE(has_line(page, "nackguard_queue_facts 0"));
  EXPECT_TRUE(has_line(page, "nackguard_queue_facts_forgotten_total 0"));
  EXPECT_TRUE(has_line(page, "nackguard_retained_body_bytes 0"));
  EXPECT_TRUE(has_line(page, "nackguard_retained_body_bytes_limit 1000"));

  for (int i = 0; i < 3; ++i) {
    context.tracker().upsert(retry::make_key("q", std::to_string(i)), 1000,
                             [](auto& e) { ++e.returns; });
  }
  ASSERT_TRUE(context.budget().try_reserve(300));
  page = registry.render();
  EXPECT_TRUE(has_line(page, "nackguard_tracker_entries 1"));
  EXPECT_TRUE(has_line(page, "nackguard_tracker_evictions_total 2"));
  EXPECT_TRUE(has_line(page, "nackguard_retained_body_bytes 300"));
  context.budget().release(300);
}

}  // namespace
}  // namespace nackguard::metrics
