#pragma once
// The metrics registry: every series of every metric in metric_list.hpp. Updates are relaxed
// atomic adds from any thread (plus, for a queue label, one shared-lock lookup of the queue's
// index); render() writes the Prometheus text format 0.0.4, in the order of the list.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/metrics/metric_list.hpp"
#include "proxy/metrics/queue_labels.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/fallback.hpp"

namespace nackguard::metrics {

// What a management API lookup of a queue's delivery limit came to (kLookupResultValues).
enum class LookupResult : std::uint8_t { ok, not_found, no_statistics, failed };

// Which way relayed frames travelled.
enum class Direction : std::uint8_t { client_to_broker = 0, broker_to_client = 1 };

struct RegistryOptions {
  std::string version = "unknown";  // build_info's version label
  // Distinct queue label values; the series of further queues add up under queue="_other".
  std::size_t max_queue_labels = 100;
  // The address label's values, "host:port", in the order of upstream.addresses (at least
  // one); the net layer passes an address by its index in this list.
  std::vector<std::string> upstream_addresses{"127.0.0.1:5672"};
};

class Registry {
 public:
  // A value read at scrape time, on the scraping thread.
  using Source = std::function<double()>;

  explicit Registry(RegistryOptions options = {});
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Connections and traffic (net).
  void client_connected();
  void client_disconnected();
  // By the address's index in RegistryOptions::upstream_addresses (one out of range is
  // ignored).
  void upstream_connected(std::size_t address);
  void upstream_disconnected(std::size_t address);
  void upstream_connect_failed(std::size_t address);
  // No address accepted a client connection's upstream connection.
  void upstream_unavailable();
  void add_traffic(Direction direction, std::uint64_t frames, std::uint64_t bytes);

  // Policy reloads (whoever reloads them).
  void policy_reload(bool ok);
  // A delivery-limit lookup in the management API (net::ManagementClient).
  void management_lookup(LookupResult result);

  // The guard's events (MetricsListener forwards them).
  void delivery(std::string_view queue);
  void returned(std::string_view queue);
  void requeue(std::string_view queue, retry::Action action);
  // Counts the dead-letter and observes `returns` in returns_before_dead_letter.
  void dead_letter(std::string_view queue, retry::DeadLetterReason reason, std::uint32_t returns);
  void ack_timeout(std::string_view queue);
  // Counted under its cause label (kCauseValues); FallbackCause::none is no fallback.
  void fallback(std::string_view queue, retry::Fallback fallback);
  // Sets outage{queue} to 1 or 0. Under "_other" it is 1 while any queue counted there is in
  // outage.
  void outage(std::string_view queue, bool active);

  // Sets where a counter_source or gauge_source metric is read from; until set, the metric has
  // no sample. Throws std::invalid_argument for a metric of another type.
  void set_source(Metric metric, Source source);

  // The whole page, in the text format 0.0.4.
  std::string render() const;

  // A queue's counters since start, for /status (registry.cpp).
  struct QueueCounts {
    std::string queue;  // "_other" for the queues past max_queue_labels
    std::uint64_t deliveries = 0;
    std::uint64_t returns = 0;
    std::array<std::uint64_t, kActionValues.size()> requeues{};      // by retry::Action
    std::array<std::uint64_t, kReasonValues.size()> dead_letters{};  // as kReasonValues
    std::uint64_t fallbacks = 0;                                     // every cause
    std::uint64_t ack_timeouts = 0;
    bool outage = false;
  };
  // Every queue with its own label, then "_other" if a queue was counted there.
  std::vector<QueueCounts> queue_counts() const;
  std::int64_t client_connections() const;
  std::uint64_t policy_reloads(bool ok) const;

  const RegistryOptions& options() const { return options_; }

 private:
  struct Family;
  struct Histogram;

  Family& family(Metric metric) { return *families_[static_cast<std::size_t>(metric)]; }
  const Family& family(Metric metric) const { return *families_[static_cast<std::size_t>(metric)]; }
  std::uint64_t value(Metric metric, std::size_t queue_index, std::size_t fixed_index) const;
  void add(Metric metric, std::size_t queue_index, std::size_t fixed_index, std::uint64_t n = 1);
  // The values of a fixed or address label, in index order.
  std::span<const std::string_view> label_values(MetricLabel label) const;
  void add_for_address(Metric metric, std::size_t address, std::uint64_t n);
  void render_family(std::string& out, const Family& family,
                     const std::vector<QueueLabels::Entry>& queues) const;
  void render_histogram(std::string& out, const Family& family) const;

  RegistryOptions options_;
  std::vector<std::string_view> address_values_;  // views of options_.upstream_addresses
  QueueLabels queues_;
  std::array<std::unique_ptr<Family>, kMetricCount> families_;
  std::mutex other_outage_mutex_;
  std::int64_t other_outages_ = 0;  // queues under "_other" in outage now
  mutable std::mutex sources_mutex_;
};

}  // namespace nackguard::metrics
