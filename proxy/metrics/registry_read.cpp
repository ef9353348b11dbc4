// The registry's counters read back per queue, for /status.

#include "proxy/metrics/registry.hpp"
#include "proxy/metrics/registry_family.hpp"

namespace nackguard::metrics {

std::uint64_t Registry::value(Metric metric, std::size_t queue_index,
                              std::size_t fixed_index) const {
  const Family& f = family(metric);
  return f.values[queue_index * f.fixed_count + fixed_index].load(std::memory_order_relaxed);
}

std::vector<Registry::QueueCounts> Registry::queue_counts() const {
  std::vector<QueueCounts> out;
  for (const QueueLabels::Entry& entry : queues_.snapshot()) {
    QueueCounts counts;
    counts.queue = entry.name;
    const std::size_t q = entry.index;
    counts.deliveries = value(Metric::deliveries_total, q, 0);
    counts.returns = value(Metric::returns_total, q, 0);
    for (std::size_t i = 0; i < counts.requeues.size(); ++i) {
      counts.requeues[i] = value(Metric::requeues_total, q, i);
    }
    for (std::size_t i = 0; i < counts.dead_letters.size(); ++i) {
      counts.dead_letters[i] = value(Metric::dead_letters_total, q, i);
    }
    for (std::size_t i = 0; i < kCauseValues.size(); ++i) {
      counts.fallbacks += value(Metric::fallbacks_total, q, i);
    }
    counts.ack_timeouts = value(Metric::ack_timeouts_total, q, 0);
    counts.outage = value(Metric::outage, q, 0) != 0;
    out.push_back(std::move(counts));
  }
  return out;
}

std::int64_t Registry::client_connections() const {
  return static_cast<std::int64_t>(value(Metric::client_connections, 0, 0));
}

std::uint64_t Registry::policy_reloads(bool ok) const {
  return value(Metric::policy_reloads_total, 0, ok ? 0 : 1);
}

}  // namespace nackguard::metrics
