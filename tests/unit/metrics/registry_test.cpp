#include "proxy/metrics/registry.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace nackguard::metrics {
namespace {

using retry::Action;
using retry::DeadLetterReason;

// Sample lines only ("name{labels} value"), by series.
std::map<std::string, std::string> samples(const std::string& page) {
  std::map<std::string, std::string> result;
  std::istringstream lines(page);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    result[line.substr(0, space)] = line.substr(space + 1);
  }
  return result;
}

TEST(Registry, RendersEveryMetricInDeclaredOrder) {
  Registry registry({.version = "1.2.3",
                     .max_queue_labels = 100,
                     .upstream_addresses = {"rabbit-0:5672", "rabbit-1:5672"}});
  registry.client_connected();
  registry.client_connected();
  registry.client_disconnected();
  registry.upstream_connected(1);
  registry.upstream_connect_failed(0);
  registry.upstream_unavailable();
  registry.add_traffic(Direction::client_to_broker, 3, 120);
  registry.add_traffic(Direction::broker_to_client, 5, 4000);
  registry.delivery("orders");
  registry.delivery("orders");
  registry.returned("orders");
  registry.requeue("orders", Action::forward);
  registry.requeue("orders", Action::dead_letter);
  registry.dead_letter("orders", DeadLetterReason::max_redeliveries, 4);
  registry.fallback("orders", {retry::FallbackCause::no_channel, false});
  registry.outage("orders", true);
  registry.policy_reload(true);
  registry.management_lookup(LookupResult::ok);
  registry.management_lookup(LookupResult::failed);
  registry.management_lookup(LookupResult::failed);
  registry.set_source(Metric::tracker_entries, [] { return 7.0; });
  registry.set_source(Metric::management_limits_known, [] { return 1.0; });

  const std::string expected =
      R"(# HELP nackguard_build_info Always 1; the version label names the running nackguard.
# TYPE nackguard_build_info gauge
nackguard_build_info{version="1.2.3"} 1
# HELP nackguard_client_connections Client connections open now.
# TYPE nackguard_client_connections gauge
nackguard_client_connections 1
# HELP nackguard_upstream_connections Upstream connections open now, by the broker address they were made to.
# TYPE nackguard_upstream_connections gauge
nackguard_upstream_connections{address="rabbit-0:5672"} 0
nackguard_upstream_connections{address="rabbit-1:5672"} 1
# HELP nackguard_upstream_connect_failures_total Connects to a broker address that could not be resolved, failed or timed out, the TLS handshake included, by address.
# TYPE nackguard_upstream_connect_failures_total counter
nackguard_upstream_connect_failures_total{address="rabbit-0:5672"} 1
nackguard_upstream_connect_failures_total{address="rabbit-1:5672"} 0
# HELP nackguard_upstream_unavailable_total Client connections closed before the AMQP handshake because no broker address accepted the upstream connection.
# TYPE nackguard_upstream_unavailable_total counter
nackguard_upstream_unavailable_total 1
# HELP nackguard_accept_failures_total Client connections that could not be accepted (out of file descriptors: EMFILE, ENFILE); each pauses accepting for 100 ms.
# TYPE nackguard_accept_failures_total counter
# HELP nackguard_frames_total AMQP frames relayed, by the direction they travelled.
# TYPE nackguard_frames_total counter
nackguard_frames_total{direction="client_to_broker"} 3
nackguard_frames_total{direction="broker_to_client"} 5
# HELP nackguard_bytes_total Bytes of the AMQP frames relayed, by the direction they travelled.
# TYPE nackguard_bytes_total counter
nackguard_bytes_total{direction="client_to_broker"} 120
nackguard_bytes_total{direction="broker_to_client"} 4000
# HELP nackguard_deliveries_total Messages delivered by the broker to consumers, by queue.
# TYPE nackguard_deliveries_total counter
nackguard_deliveries_total{queue="orders"} 2
# HELP nackguard_returns_total Messages the consumer gave back: nacks, rejects and recovers with requeue, and messages unacked when its channel or connection ended.
# TYPE nackguard_returns_total counter
nackguard_returns_total{queue="orders"} 1
# HELP nackguard_requeues_total What became of each return: forwarded to the broker, republished with a delay, dead-lettered, or republished to its own queue ahead of the broker's delivery limit.
# TYPE nackguard_requeues_total counter
nackguard_requeues_total{queue="orders",action="forwarded"} 1
nackguard_requeues_total{queue="orders",action="delayed"} 0
nackguard_requeues_total{queue="orders",action="dead_lettered"} 1
nackguard_requeues_total{queue="orders",action="republished"} 0
# HELP nackguard_dead_letters_total Messages dead-lettered by nackguard, by reason.
# TYPE nackguard_dead_letters_total counter
nackguard_dead_letters_total{queue="orders",reason="max_redeliveries"} 1
nackguard_dead_letters_total{queue="orders",reason="crash_loop"} 0
nackguard_dead_letters_total{queue="orders",reason="broker_delivery_limit"} 0
nackguard_dead_letters_total{queue="orders",reason="consumer_timeout"} 0
# HELP nackguard_fallbacks_total Republishes or dead-letters that could not be completed, so the consumer's requeue went to the broker unchanged, by cause.
# TYPE nackguard_fallbacks_total counter
nackguard_fallbacks_total{queue="orders",cause="body_not_retained"} 0
nackguard_fallbacks_total{queue="orders",cause="no_channel"} 1
nackguard_fallbacks_total{queue="orders",cause="malformed_properties"} 0
nackguard_fallbacks_total{queue="orders",cause="republish_failed"} 0
nackguard_fallbacks_total{queue="orders",cause="at_broker_limit"} 0
nackguard_fallbacks_total{queue="orders",cause="encode_failed"} 0
# HELP nackguard_ack_timeouts_total Channels nackguard closed because a delivery stayed unacked past its policy's ack_timeout; each counts one return of that delivery.
# TYPE nackguard_ack_timeouts_total counter
nackguard_ack_timeouts_total{queue="orders"} 0
# HELP nackguard_outage 1 while most messages of the queue fail: returns are delayed and not counted towards dead-lettering.
# TYPE nackguard_outage gauge
nackguard_outage{queue="orders"} 1
# HELP nackguard_outage_messages Message hashes outage detection holds to count distinct messages, not deliveries (at most tracker.max_entries).
# TYPE nackguard_outage_messages gauge
# HELP nackguard_outage_messages_dropped_total Messages outage detection kept no hash for, because it held tracker.max_entries: each counted as a message not seen before.
# TYPE nackguard_outage_messages_dropped_total counter
# HELP nackguard_outage_max_reached_total Outages that lasted rate.max_outage: from then on the queue's returns count towards dead-lettering again.
# TYPE nackguard_outage_max_reached_total counter
# HELP nackguard_tracker_entries Return counts held in the redelivery tracker.
# TYPE nackguard_tracker_entries gauge
nackguard_tracker_entries 7
# HELP nackguard_tracker_evictions_total Return counts dropped, least recently used first, to stay within tracker.max_entries.
# TYPE nackguard_tracker_evictions_total counter
# HELP nackguard_tracker_expiries_total Return counts forgotten after tracker.idle_ttl without a return.
# TYPE nackguard_tracker_expiries_total counter
# HELP nackguard_queue_facts Queues whose type and declared delivery limit nackguard remembers (at most 10000).
# TYPE nackguard_queue_facts gauge
# HELP nackguard_queue_facts_forgotten_total Queues forgotten, oldest first, to stay within that bound.
# TYPE nackguard_queue_facts_forgotten_total counter
# HELP nackguard_management_lookups_total Delivery-limit lookups in RabbitMQ's management API (upstream.management), by result: ok, not_found (no such queue yet), no_statistics (no policies shown for it yet), failed.
# TYPE nackguard_management_lookups_total counter
nackguard_management_lookups_total{result="ok"} 1
nackguard_management_lookups_total{result="not_found"} 0
nackguard_management_lookups_total{result="no_statistics"} 0
nackguard_management_lookups_total{result="failed"} 2
# HELP nackguard_management_limits_known Queues whose delivery limit the management API told (at most 10000).
# TYPE nackguard_management_limits_known gauge
nackguard_management_limits_known 1
# HELP nackguard_management_limits_forgotten_total Queues whose looked-up delivery limit was forgotten, oldest first, to stay within that bound.
# TYPE nackguard_management_limits_forgotten_total counter
# HELP nackguard_retained_body_bytes Message bytes held in memory for republishing and for deliveries held back, and the records (content headers included) of unacked deliveries.
# TYPE nackguard_retained_body_bytes gauge
# HELP nackguard_retained_body_bytes_limit limits.retained_body_bytes: past it, nackguard falls back to forwarding requeues.
# TYPE nackguard_retained_body_bytes_limit gauge
# HELP nackguard_retained_body_refusals_total Bodies, held-back deliveries and delivery records not kept because limits.retained_body_bytes was reached.
# TYPE nackguard_retained_body_refusals_total counter
# HELP nackguard_untracked_deliveries_total Deliveries forwarded without a record because limits.retained_body_bytes was reached: their returns are not counted.
# TYPE nackguard_untracked_deliveries_total counter
# HELP nackguard_policy_reloads_total Policy reloads, by result.
# TYPE nackguard_policy_reloads_total counter
nackguard_policy_reloads_total{result="ok"} 1
nackguard_policy_reloads_total{result="error"} 0
# HELP nackguard_returns_before_dead_letter The return count of each message when it was dead-lettered.
# TYPE nackguard_returns_before_dead_letter histogram
nackguard_returns_before_dead_letter_bucket{le="1"} 0
nackguard_returns_before_dead_letter_bucket{le="2"} 0
nackguard_returns_before_dead_letter_bucket{le="3"} 0
nackguard_returns_before_dead_letter_bucket{le="5"} 1
nackguard_returns_before_dead_letter_bucket{le="10"} 1
nackguard_returns_before_dead_letter_bucket{le="20"} 1
nackguard_returns_before_dead_letter_bucket{le="50"} 1
nackguard_returns_before_dead_letter_bucket{le="100"} 1
nackguard_returns_before_dead_letter_bucket{le="+Inf"} 1
nackguard_returns_before_dead_letter_sum 4
nackguard_returns_before_dead_letter_count 1
)";
  EXPECT_EQ(registry.render(), expected);
}

TEST(Registry, EveryMetricHasHelpAndTypeOnceEvenWithoutSamples) {
  Registry registry;
  const std::string page = registry.render();
  for (const MetricDef& def : kMetricDefs) {
    const std::string help = "# HELP " + std::string(def.name) + " ";
    const std::string type = "# TYPE " + std::string(def.name) + " ";
    EXPECT_EQ(page.find(help), page.rfind(help)) << def.name;
    EXPECT_NE(page.find(help), std::string::npos) << def.name;
    EXPECT_NE(page.find(type), std::string::npos) << def.name;
  }
  EXPECT_EQ(samples(page).count("nackguard_build_info{version=\"unknown\"}"), 1u);
  EXPECT_EQ(page.find("queue="), std::string::npos);
}

TEST(Registry, QueuesRenderSortedByName) {
  Registry registry;
  registry.delivery("b");
  registry.delivery("a");
  registry.delivery("c");
  const std::string page = registry.render();
  const auto a = page.find(R"(nackguard_deliveries_total{queue="a"})");
  const auto b = page.find(R"(nackguard_deliveries_total{queue="b"})");
  const auto c = page.find(R"(nackguard_deliveries_total{queue="c"})");
  ASSERT_NE(c, std::string::npos);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

TEST(Registry, EscapesQueueNames) {
  Registry registry;
  registry.delivery("we\"ird\\q\nname");
  const auto page = samples(registry.render());
  EXPECT_EQ(page.at(R"(nackguard_deliveries_total{queue="we\"ird\\q\nname"})"), "1");
}

TEST(Registry, TheQueueBeyondTheCapGoesToOther) {
  Registry registry;  // max_queue_labels defaults to 100
  for (int i = 0; i < 100; ++i) registry.delivery("q" + std::to_string(i));
  EXPECT_EQ(samples(registry.render()).count(R"(nackguard_deliveries_total{queue="_other"})"), 0u);

  registry.delivery("q100");  // the 101st
  registry.delivery("q101");
  registry.delivery("q5");
  registry.returned("q100");
  const auto page = samples(registry.render());
  EXPECT_EQ(page.count(R"(nackguard_deliveries_total{queue="q100"})"), 0u);
  EXPECT_EQ(page.at(R"(nackguard_deliveries_total{queue="_other"})"), "2");
  EXPECT_EQ(page.at(R"(nackguard_returns_total{queue="_other"})"), "1");
  EXPECT_EQ(page.at(R"(nackguard_deliveries_total{queue="q5"})"), "2");
  std::set<std::string> queues;
  for (const auto& [series, value] : page) {
    if (series.starts_with("nackguard_deliveries_total{")) queues.insert(series);
  }
  EXPECT_EQ(queues.size(), 101u);
}

TEST(Registry, OtherOutageIsOneWhileAnyQueueBeyondTheCapIsInOutage) {
  Registry registry({.version = "x", .max_queue_labels = 1});
  registry.outage("mine", true);
  registry.outage("x1", true);
  registry.outage("x2", true);
  registry.outage("x1", false);
  auto page = samples(registry.render());
  EXPECT_EQ(page.at(R"(nackguard_outage{queue="mine"})"), "1");
  EXPECT_EQ(page.at(R"(nackguard_outage{queue="_other"})"), "1");
  registry.outage("x2", false);
  registry.outage("mine", false);
  page = samples(registry.render());
  EXPECT_EQ(page.at(R"(nackguard_outage{queue="_other"})"), "0");
  EXPECT_EQ(page.at(R"(nackguard_outage{queue="mine"})"), "0");
}

TEST(Registry, HistogramBucketsAreCumulativeWithSumAndCount) {
  Registry registry;
  for (std::uint32_t returns : {1u, 2u, 3u, 4u, 5u, 6u, 50u, 51u, 100u, 1000u}) {
    registry.dead_letter("q", DeadLetterReason::max_redeliveries, returns);
  }
  const auto page = samples(registry.render());
  const std::string bucket = "nackguard_returns_before_dead_letter_bucket";
  EXPECT_EQ(page.at(bucket + R"({le="1"})"), "1");
  EXPECT_EQ(page.at(bucket + R"({le="2"})"), "2");
  EXPECT_EQ(page.at(bucket + R"({le="3"})"), "3");
  EXPECT_EQ(page.at(bucket + R"({le="5"})"), "5");
  EXPECT_EQ(page.at(bucket + R"({le="10"})"), "6");
  EXPECT_EQ(page.at(bucket + R"({le="20"})"), "6");
  EXPECT_EQ(page.at(bucket + R"({le="50"})"), "7");
  EXPECT_EQ(page.at(bucket + R"({le="100"})"), "9");
  EXPECT_EQ(page.at(bucket + R"({le="+Inf"})"), "10");
  EXPECT_EQ(page.at("nackguard_returns_before_dead_letter_sum"), "1222");
  EXPECT_EQ(page.at("nackguard_returns_before_dead_letter_count"), "10");
  EXPECT_EQ(page.at(R"(nackguard_dead_letters_total{queue="q",reason="max_redeliveries"})"), "10");
}

TEST(Registry, DeadLetterReasonsAndFallbackCauses) {
  Registry registry;
  registry.dead_letter("q", DeadLetterReason::crash_loop, 3);
  registry.dead_letter("q", DeadLetterReason::none, 3);
  registry.fallback("q", {retry::FallbackCause::republish_failed, false});
  const auto page = samples(registry.render());
  EXPECT_EQ(page.at(R"(nackguard_dead_letters_total{queue="q",reason="crash_loop"})"), "1");
  EXPECT_EQ(page.at(R"(nackguard_dead_letters_total{queue="q",reason="max_redeliveries"})"), "1");
  registry.dead_letter("q", DeadLetterReason::broker_delivery_limit, 21);
  registry.requeue("q", retry::Action::republish);
  const auto later = samples(registry.render());
  EXPECT_EQ(later.at(R"(nackguard_dead_letters_total{queue="q",reason="broker_delivery_limit"})"),
            "1");
  EXPECT_EQ(later.at(R"(nackguard_requeues_total{queue="q",action="republished"})"), "1");
  EXPECT_EQ(page.at(R"(nackguard_fallbacks_total{queue="q",cause="republish_failed"})"), "1");
}

// Each cause is counted under the label its log line names (retry::to_string), and a fallback at
// the broker's limit under at_broker_limit whatever its cause; none is no fallback.
TEST(Registry, EveryFallbackCauseHasTheLabelItsLogLineNames) {
  using retry::FallbackCause;
  const std::vector<FallbackCause> causes{
      FallbackCause::body_not_retained, FallbackCause::body_skipped,
      FallbackCause::no_channel,        FallbackCause::malformed_properties,
      FallbackCause::republish_failed,  FallbackCause::encode_failed};
  for (FallbackCause cause : causes) {
    Registry registry;
    registry.fallback("q", {cause, false});
    registry.fallback("q", {FallbackCause::none, false});
    const auto page = samples(registry.render());
    const std::string label(retry::to_string(cause));
    for (std::string_view value : kCauseValues) {
      EXPECT_EQ(
          page.at(R"(nackguard_fallbacks_total{queue="q",cause=")" + std::string(value) + R"("})"),
          value == label ? "1" : "0")
          << label;
    }
    registry.fallback("q", {cause, true});
    EXPECT_EQ(samples(registry.render())
                  .at(R"(nackguard_fallbacks_total{queue="q",cause="at_broker_limit"})"),
              "1");
  }
}

TEST(Registry, SourcesAreReadAtEveryScrape) {
  Registry registry;
  double bytes = 10;
  registry.set_source(Metric::retained_body_bytes, [&bytes] { return bytes; });
  registry.set_source(Metric::retained_body_bytes_limit, [] { return 268435456.0; });
  EXPECT_EQ(samples(registry.render()).at("nackguard_retained_body_bytes"), "10");
  bytes = 2048;
  auto page = samples(registry.render());
  EXPECT_EQ(page.at("nackguard_retained_body_bytes"), "2048");
  EXPECT_EQ(page.at("nackguard_retained_body_bytes_limit"), "268435456");
}

TEST(Registry, OnlySourceMetricsTakeASource) {
  Registry registry;
  EXPECT_THROW(registry.set_source(Metric::deliveries_total, [] { return 1.0; }),
               std::invalid_argument);
  EXPECT_THROW(registry.set_source(Metric::returns_before_dead_letter, [] { return 1.0; }),
               std::invalid_argument);
  EXPECT_NO_THROW(registry.set_source(Metric::tracker_expiries_total, [] { return 1.0; }));
}

TEST(Registry, CountersNeverDecreaseUnderConcurrentUpdates) {
  Registry registry({.version = "x", .max_queue_labels = 8});
  std::atomic<bool> done{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&registry, t] {
      for (int i = 0; i < 20000; ++i) {
        const std::string queue = "q" + std::to_string((i + t) % 12);
        registry.delivery(queue);
        registry.returned(queue);
        registry.requeue(queue, static_cast<Action>(i % 3));
        registry.add_traffic(Direction::client_to_broker, 1, 10);
        if (i % 100 == 0) registry.dead_letter(queue, DeadLetterReason::crash_loop, i % 7);
      }
    });
  }
  std::map<std::string, double> last;
  auto check = [&] {
    for (const auto& [series, text] : samples(registry.render())) {
      if (series.find("_total") == std::string::npos &&
          series.find("_bucket") == std::string::npos &&
          series.find("_count") == std::string::npos && series.find("_sum") == std::string::npos) {
        continue;
      }
      const double value = std::stod(text);
      auto [it, inserted] = last.emplace(series, value);
      EXPECT_GE(value, it->second) << series;
      it->second = value;
    }
  };
  std::thread scraper([&] {
    while (!done.load()) check();
  });
  for (auto& writer : writers) writer.join();
  done = true;
  scraper.join();
  check();
  const auto page = samples(registry.render());
  EXPECT_EQ(page.at(R"(nackguard_frames_total{direction="client_to_broker"})"), "60000");
  EXPECT_EQ(page.at(R"(nackguard_bytes_total{direction="client_to_broker"})"), "600000");
  double deliveries = 0;
  for (const auto& [series, text] : page) {
    if (series.starts_with("nackguard_deliveries_total{")) deliveries += std::stod(text);
  }
  EXPECT_EQ(deliveries, 60000);
}

TEST(Registry, MetricNamesAreValidAndUnique) {
  std::set<std::string_view> names;
  for (const MetricDef& def : kMetricDefs) {
    EXPECT_TRUE(names.insert(def.name).second) << def.name;
    EXPECT_TRUE(def.name.starts_with("nackguard_")) << def.name;
    for (char c : def.name) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    const bool counter = def.type == MetricType::counter || def.type == MetricType::counter_source;
    EXPECT_EQ(counter, def.name.ends_with("_total")) << def.name;
    EXPECT_FALSE(def.help.empty()) << def.name;
  }
}

}  // namespace
}  // namespace nackguard::metrics
