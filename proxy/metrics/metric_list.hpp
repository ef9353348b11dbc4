#pragma once
// Every metric nackguard exports, declared once: its name (after "nackguard_"), its type, its
// help text and its labels. /metrics renders them in this order. Alert rules and outside tests
// use these names: rename nothing.
//
// Every label has a bounded set of values: a fixed list below, the build's version, an
// upstream address (one of the configured list, RegistryOptions::upstream_addresses), or a
// queue name (at most RegistryOptions::max_queue_labels of them, the rest add up under
// "_other").

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

// X(id, type, help, labels...). Types: counter, gauge, histogram, and counter_source and
// gauge_source, whose value is read at scrape time through Registry::set_source.
// clang-format off
#define NACKGUARD_METRICS(X)                                                                       \
  X(build_info, gauge,                                                                             \
    "Always 1; the version label names the running nackguard.", version)                           \
  X(client_connections, gauge,                                                                     \
    "Client connections open now.")                                                                \
  X(upstream_connections, gauge,                                                                   \
    "Upstream connections open now, by the broker address they were made to.", address)           \
  X(upstream_connect_failures_total, counter,                                                      \
    "Connects to a broker address that could not be resolved, failed or timed out, the TLS "       \
    "handshake included, by address.", address)                                                    \
  X(upstream_unavailable_total, counter,                                                           \
    "Client connections closed before the AMQP handshake because no broker address accepted "     \
    "the upstream connection.")                                                                    \
  X(accept_failures_total, counter_source,                                                         \
    "Client connections that could not be accepted (out of file descriptors: EMFILE, ENFILE); "   \
    "each pauses accepting for 100 ms.")                                                           \
  X(frames_total, counter,                                                                         \
    "AMQP frames relayed, by the direction they travelled.", direction)                            \
  X(bytes_total, counter,                                                                          \
    "Bytes of the AMQP frames relayed, by the direction they travelled.", direction)               \
  X(deliveries_total, counter,                                                                     \
    "Messages delivered by the broker to consumers, by queue.", queue)                             \
  X(returns_total, counter,                                                                        \
    "Messages the consumer gave back: nacks, rejects and recovers with requeue, and messages "     \
    "unacked when its channel or connection ended.", queue)                                        \
  X(requeues_total, counter,                                                                       \
    "What became of each return: forwarded to the broker, republished with a delay, "             \
    "dead-lettered, or republished to its own queue ahead of the broker's delivery limit.",      \
    queue, action)                                                               \
  X(dead_letters_total, counter,                                                                   \
    "Messages dead-lettered by nackguard, by reason.", queue, reason)                              \
  X(fallbacks_total, counter,                                                                      \
    "Republishes or dead-letters that could not be completed, so the consumer's requeue went "     \
    "to the broker unchanged, by cause.", queue, cause)                                            \
  X(ack_timeouts_total, counter,                                                                   \
    "Channels nackguard closed because a delivery stayed unacked past its policy's ack_timeout; "  \
    "each counts one return of that delivery.", queue)                                             \
  X(outage, gauge,                                                                                 \
    "1 while most messages of the queue fail: returns are delayed and not counted towards "        \
    "dead-lettering.", queue)                                                                      \
  X(outage_messages, gauge_source,                                                                 \
    "Message hashes outage detection holds to count distinct messages, not deliveries (at "        \
    "most tracker.max_entries).")                                                                  \
  X(outage_messages_dropped_total, counter_source,                                                 \
    "Messages outage detection kept no hash for, because it held tracker.max_entries: each "       \
    "counted as a message not seen before.")                                                       \
  X(outage_max_reached_total, counter_source,                                                      \
    "Outages that lasted rate.max_outage: from then on the queue's returns count towards "         \
    "dead-lettering again.")                                                                       \
  X(tracker_entries, gauge_source,                                                                 \
    "Return counts held in the redelivery tracker.")                                               \
  X(tracker_evictions_total, counter_source,                                                       \
    "Return counts dropped, least recently used first, to stay within tracker.max_entries.")       \
  X(tracker_expiries_total, counter_source,                                                        \
    "Return counts forgotten after tracker.idle_ttl without a return.")                            \
  X(queue_facts, gauge_source,                                                                     \
    "Queues whose type and declared delivery limit nackguard remembers (at most 10000).")          \
  X(queue_facts_forgotten_total, counter_source,                                                   \
    "Queues forgotten, oldest first, to stay within that bound.")                                  \
  X(management_lookups_total, counter,                                                             \
    "Delivery-limit lookups in RabbitMQ's management API (upstream.management), by result: ok, "   \
    "not_found (no such queue yet), no_statistics (no policies shown for it yet), failed.",        \
    lookup_result)                                                                                 \
  X(management_limits_known, gauge_source,                                                         \
    "Queues whose delivery limit the management API told (at most 10000).")                        \
  X(management_limits_forgotten_total, counter_source,                                             \
    "Queues whose looked-up delivery limit was forgotten, oldest first, to stay within that "      \
    "bound.")                                                                                      \
  X(retained_body_bytes, gauge_source,                                                             \
    "Message bytes held in memory for republishing and for deliveries held back, and the "        \
    "records (content headers included) of unacked deliveries.")                                   \
  X(retained_body_bytes_limit, gauge_source,                                                       \
    "limits.retained_body_bytes: past it, nackguard falls back to forwarding requeues.")           \
  X(retained_body_refusals_total, counter_source,                                                  \
    "Bodies, held-back deliveries and delivery records not kept because limits."                   \
    "retained_body_bytes was reached.")                                                            \
  X(untracked_deliveries_total, counter_source,                                                    \
    "Deliveries forwarded without a record because limits.retained_body_bytes was reached: "      \
    "their returns are not counted.")                                                              \
  X(policy_reloads_total, counter,                                                                 \
    "Policy reloads, by result.", result)                                                          \
  X(returns_before_dead_letter, histogram,                                                         \
    "The return count of each message when it was dead-lettered.")
// clang-format on

namespace nackguard::metrics {

enum class Metric : std::uint8_t {
#define NACKGUARD_METRIC_ID(id, ...) id,
  NACKGUARD_METRICS(NACKGUARD_METRIC_ID)
#undef NACKGUARD_METRIC_ID
};

enum class MetricType : std::uint8_t { counter, gauge, histogram, counter_source, gauge_source };

// The Prometheus TYPE of a metric type.
constexpr std::string_view prometheus_type(MetricType type) {
  switch (type) {
    case MetricType::counter:
    case MetricType::counter_source:
      return "counter";
    case MetricType::gauge:
    case MetricType::gauge_source:
      return "gauge";
    case MetricType::histogram:
      return "histogram";
  }
  return "untyped";
}

enum class MetricLabel : std::uint8_t {
  version,
  direction,
  queue,
  action,
  reason,
  cause,
  result,
  address,
  lookup_result
};

// Fixed value lists, in the order of the enums they label.
inline constexpr std::array<std::string_view, 2> kDirectionValues{"client_to_broker",
                                                                  "broker_to_client"};
// Indexed by retry::Action (forward, delay, dead_letter, republish).
inline constexpr std::array<std::string_view, 4> kActionValues{"forwarded", "delayed",
                                                               "dead_lettered", "republished"};
// Indexed by retry::DeadLetterReason minus one.
inline constexpr std::array<std::string_view, 4> kReasonValues{
    "max_redeliveries", "crash_loop", "broker_delivery_limit", "consumer_timeout"};
// The fallback causes (retry::Fallback; the names are retry::to_string's, and
// "at_broker_limit" for a fallback at the broker's limit): see cause_index in registry.cpp.
inline constexpr std::array<std::string_view, 6> kCauseValues{
    "body_not_retained", "no_channel",      "malformed_properties",
    "republish_failed",  "at_broker_limit", "encode_failed"};
inline constexpr std::array<std::string_view, 2> kResultValues{"ok", "error"};
// Indexed by LookupResult (registry.hpp).
inline constexpr std::array<std::string_view, 4> kLookupResultValues{"ok", "not_found",
                                                                     "no_statistics", "failed"};

// The queue label value that the queues beyond max_queue_labels add up under.
inline constexpr std::string_view kOtherQueue = "_other";

// Upper bounds of the returns_before_dead_letter buckets (+Inf is implicit).
inline constexpr std::array<double, 8> kReturnsBeforeDeadLetterBuckets{1, 2, 3, 5, 10, 20, 50, 100};

enum class LabelKind : std::uint8_t {
  fixed,     // one of `values`
  queue,     // a queue name, capped
  constant,  // one value given at start (the version)
  address,   // one of the upstream addresses given at start, by index
};

struct LabelDef {
  std::string_view name;
  LabelKind kind;
  std::span<const std::string_view> values;  // for LabelKind::fixed
};

constexpr LabelDef label_def(MetricLabel label) {
  switch (label) {
    case MetricLabel::version:
      return {"version", LabelKind::constant, {}};
    case MetricLabel::direction:
      return {"direction", LabelKind::fixed, kDirectionValues};
    case MetricLabel::queue:
      return {"queue", LabelKind::queue, {}};
    case MetricLabel::action:
      return {"action", LabelKind::fixed, kActionValues};
    case MetricLabel::reason:
      return {"reason", LabelKind::fixed, kReasonValues};
    case MetricLabel::cause:
      return {"cause", LabelKind::fixed, kCauseValues};
    case MetricLabel::result:
      return {"result", LabelKind::fixed, kResultValues};
    case MetricLabel::address:
      return {"address", LabelKind::address, {}};
    case MetricLabel::lookup_result:
      return {"result", LabelKind::fixed, kLookupResultValues};
  }
  return {};
}

inline constexpr std::size_t kMaxLabels = 2;

struct MetricDef {
  std::string_view name;  // the full name, "nackguard_..."
  MetricType type;
  std::string_view help;
  std::array<MetricLabel, kMaxLabels> labels{};
  std::size_t label_count = 0;

  std::span<const MetricLabel> label_list() const { return {labels.data(), label_count}; }
};

namespace detail {
template <typename... Labels>
constexpr MetricDef make_def(std::string_view name, MetricType type, std::string_view help,
                             Labels... labels) {
  static_assert(sizeof...(labels) <= kMaxLabels, "raise kMaxLabels");
  return MetricDef{name, type, help, {labels...}, sizeof...(labels)};
}

using enum MetricLabel;
using enum MetricType;
inline constexpr std::array kMetricDefs{
#define NACKGUARD_METRIC_DEF(id, type, help, ...) \
  make_def("nackguard_" #id, type, help __VA_OPT__(, ) __VA_ARGS__),
    NACKGUARD_METRICS(NACKGUARD_METRIC_DEF)
#undef NACKGUARD_METRIC_DEF
};
}  // namespace detail

inline constexpr std::span<const MetricDef> kMetricDefs = detail::kMetricDefs;
inline constexpr std::size_t kMetricCount = detail::kMetricDefs.size();

constexpr const MetricDef& metric_def(Metric metric) {
  return detail::kMetricDefs[static_cast<std::size_t>(metric)];
}

}  // namespace nackguard::metrics
