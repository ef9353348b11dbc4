#include "proxy/metrics/registry.hpp"

#include "proxy/metrics/registry_family.hpp"

#include <stdexcept>

namespace nackguard::metrics {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// Histograms and scrape-time sources hold one series and take no labels.
constexpr bool only_plain_metrics_have_labels() {
  for (const MetricDef& def : kMetricDefs) {
    if (def.type != MetricType::counter && def.type != MetricType::gauge && def.label_count != 0) {
      return false;
    }
  }
  return true;
}
static_assert(only_plain_metrics_have_labels());

// add_for_address indexes the series by the address alone.
constexpr bool address_is_the_only_label() {
  for (const MetricDef& def : kMetricDefs) {
    for (std::size_t i = 0; i < def.label_count; ++i) {
      if (def.labels[i] == MetricLabel::address && def.label_count != 1) return false;
    }
  }
  return true;
}
static_assert(address_is_the_only_label());

std::span<const double> histogram_bounds(Metric metric) {
  switch (metric) {
    case Metric::returns_before_dead_letter:
      return kReturnsBeforeDeadLetterBuckets;
    default:
      throw std::logic_error("histogram " + std::string(metric_def(metric).name) +
                             " has no buckets: add them to histogram_bounds()");
  }
}

// The index of a fallback's cause label in kCauseValues.
std::size_t cause_index(retry::Fallback fallback) {
  if (fallback.at_broker_limit) return 4;
  switch (fallback.cause) {
    case retry::FallbackCause::none:
    case retry::FallbackCause::body_not_retained:
    case retry::FallbackCause::body_skipped:
      return 0;
    case retry::FallbackCause::no_channel:
      return 1;
    case retry::FallbackCause::malformed_properties:
      return 2;
    case retry::FallbackCause::republish_failed:
      return 3;
    case retry::FallbackCause::encode_failed:
      return 5;
  }
  return 0;
}

static_assert(kActionValues.size() == 4 && static_cast<int>(retry::Action::forward) == 0 &&
              static_cast<int>(retry::Action::delay) == 1 &&
              static_cast<int>(retry::Action::dead_letter) == 2 &&
              static_cast<int>(retry::Action::republish) == 3);
static_assert(kLookupResultValues.size() == 4 && static_cast<int>(LookupResult::failed) == 3);
static_assert(kReasonValues.size() == 4 &&
              static_cast<int>(retry::DeadLetterReason::max_redeliveries) == 1 &&
              static_cast<int>(retry::DeadLetterReason::crash_loop) == 2 &&
              static_cast<int>(retry::DeadLetterReason::broker_delivery_limit) == 3 &&
              static_cast<int>(retry::DeadLetterReason::consumer_timeout) == 4);

}  // namespace

Registry::Registry(RegistryOptions options)
    : options_(std::move(options)), queues_(options_.max_queue_labels) {
  if (options_.upstream_addresses.empty()) {
    throw std::invalid_argument("RegistryOptions::upstream_addresses needs at least one address");
  }
  for (const std::string& address : options_.upstream_addresses) address_values_.push_back(address);
  for (std::size_t i = 0; i < kMetricCount; ++i) {
    auto family = std::make_unique<Family>();
    family->def = &kMetricDefs[i];
    for (MetricLabel label : family->def->label_list()) {
      const LabelDef def = label_def(label);
      if (def.kind == LabelKind::queue) {
        family->has_queue = true;
        family->queue_slots = queues_.slots();
      } else if (def.kind == LabelKind::fixed || def.kind == LabelKind::address) {
        family->fixed_count *= label_values(label).size();
      }
    }
    if (family->def->type == MetricType::histogram) {
      family->histogram = std::make_unique<Histogram>();
      family->histogram->bounds = histogram_bounds(static_cast<Metric>(i));
      family->histogram->buckets =
          std::make_unique<std::atomic<std::uint64_t>[]>(family->histogram->bounds.size() + 1);
    } else if (family->def->type == MetricType::counter || family->def->type == MetricType::gauge) {
      family->values =
          std::make_unique<std::atomic<std::uint64_t>[]>(family->queue_slots * family->fixed_count);
    }
    families_[i] = std::move(family);
  }
  family(Metric::build_info).values[0].store(1, kRelaxed);
}

Registry::~Registry() = default;

void Registry::add(Metric metric, std::size_t queue_index, std::size_t fixed_index,
                   std::uint64_t n) {
  Family& f = family(metric);
  f.values[queue_index * f.fixed_count + fixed_index].fetch_add(n, kRelaxed);
}

void Registry::client_connected() {
  add(Metric::client_connections, 0, 0);
}

void Registry::client_disconnected() {
  // Gauges are stored as two's complement: adding ~0 subtracts one.
  add(Metric::client_connections, 0, 0, ~std::uint64_t{0});
}

std::span<const std::string_view> Registry::label_values(MetricLabel label) const {
  const LabelDef def = label_def(label);
  if (def.kind == LabelKind::address) return address_values_;
  return def.values;
}

// The address label is the only label of these metrics, so the address is the series index.
void Registry::add_for_address(Metric metric, std::size_t address, std::uint64_t n) {
  if (address >= address_values_.size()) return;
  add(metric, 0, address, n);
}

void Registry::upstream_connected(std::size_t address) {
  add_for_address(Metric::upstream_connections, address, 1);
}

void Registry::upstream_disconnected(std::size_t address) {
  add_for_address(Metric::upstream_connections, address, ~std::uint64_t{0});
}

void Registry::upstream_connect_failed(std::size_t address) {
  add_for_address(Metric::upstream_connect_failures_total, address, 1);
}

void Registry::upstream_unavailable() {
  add(Metric::upstream_unavailable_total, 0, 0);
}

void Registry::add_traffic(Direction direction, std::uint64_t frames, std::uint64_t bytes) {
  const auto index = static_cast<std::size_t>(direction);
  if (frames != 0) add(Metric::frames_total, 0, index, frames);
  if (bytes != 0) add(Metric::bytes_total, 0, index, bytes);
}

void Registry::policy_reload(bool ok) {
  add(Metric::policy_reloads_total, 0, ok ? 0 : 1);
}

void Registry::management_lookup(LookupResult result) {
  const auto index = static_cast<std::size_t>(result);
  if (index < kLookupResultValues.size()) add(Metric::management_lookups_total, 0, index);
}

void Registry::delivery(std::string_view queue) {
  add(Metric::deliveries_total, queues_.index(queue), 0);
}

void Registry::returned(std::string_view queue) {
  add(Metric::returns_total, queues_.index(queue), 0);
}

void Registry::requeue(std::string_view queue, retry::Action action) {
  const auto index = static_cast<std::size_t>(action);
  if (index >= kActionValues.size()) return;
  add(Metric::requeues_total, queues_.index(queue), index);
}

void Registry::dead_letter(std::string_view queue, retry::DeadLetterReason reason,
                           std::uint32_t returns) {
  // A dead-letter without a reason of its own is one by count.
  const std::size_t reason_index =
      reason == retry::DeadLetterReason::none ? 0 : static_cast<std::size_t>(reason) - 1;
  add(Metric::dead_letters_total, queues_.index(queue), reason_index);

  Histogram& h = *family(Metric::returns_before_dead_letter).histogram;
  std::size_t bucket = 0;
  while (bucket < h.bounds.size() && static_cast<double>(returns) > h.bounds[bucket]) ++bucket;
  h.buckets[bucket].fetch_add(1, kRelaxed);
  h.sum.fetch_add(returns, kRelaxed);
}

void Registry::ack_timeout(std::string_view queue) {
  add(Metric::ack_timeouts_total, queues_.index(queue), 0);
}

void Registry::fallback(std::string_view queue, retry::Fallback fallback) {
  if (fallback.cause == retry::FallbackCause::none) return;
  add(Metric::fallbacks_total, queues_.index(queue), cause_index(fallback));
}

void Registry::outage(std::string_view queue, bool active) {
  const std::size_t index = queues_.index(queue);
  std::atomic<std::uint64_t>& value = family(Metric::outage).values[index];
  if (index != queues_.other_index()) {
    value.store(active ? 1 : 0, kRelaxed);
    return;
  }
  std::lock_guard lock(other_outage_mutex_);
  other_outages_ += active ? 1 : -1;
  if (other_outages_ < 0) other_outages_ = 0;
  value.store(other_outages_ > 0 ? 1 : 0, kRelaxed);
}

void Registry::set_source(Metric metric, Source source) {
  Family& f = family(metric);
  if (f.def->type != MetricType::counter_source && f.def->type != MetricType::gauge_source) {
    throw std::invalid_argument(std::string(f.def->name) +
                                " is not read at scrape time; it takes no source");
  }
  std::lock_guard lock(sources_mutex_);
  f.source = std::move(source);
}

// ---- the counters read back per queue, for /status ----
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
