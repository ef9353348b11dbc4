#include "proxy/retry/health.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace nackguard::retry {
namespace {

constexpr std::int64_t kBuckets = 20;
constexpr std::int64_t kNoBucket = std::numeric_limits<std::int64_t>::min();

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

std::int64_t bucket_width_ms(const RateLimits& limits) {
  return std::max<std::int64_t>(limits.window.count() / kBuckets, 1);
}

}  // namespace

// A ring of buckets, each counting the events of one window/20 slice of time, tagged with the
// slice's number so that a stale bucket is recognised (and reset) when its slot comes round.
struct QueueHealth::Window {
  struct Bucket {
    std::int64_t slice = kNoBucket;
    std::uint32_t deliveries = 0;
    std::uint32_t returns = 0;
  };
  std::array<Bucket, kBuckets> buckets;
  std::int64_t width_ms = 0;
  std::int64_t latest_slice = kNoBucket;
  bool outage = false;
  const std::string* name = nullptr;  // the key of this window in windows_
  Window* newer = nullptr;
  Window* older = nullptr;

  // Starts over when the policy's window changed: old slices no longer line up.
  void fit(const RateLimits& limits) {
    const std::int64_t width = bucket_width_ms(limits);
    if (width == width_ms) return;
    buckets.fill(Bucket{});
    width_ms = width;
    latest_slice = kNoBucket;
  }

  // The slice events at `now_ms` count in. Time never runs backwards here: threads report
  // slightly out of order, and an early event simply counts in the latest slice.
  std::int64_t advance(std::int64_t now_ms) {
    latest_slice = std::max(latest_slice, floor_div(now_ms, width_ms));
    return latest_slice;
  }

  void add(std::int64_t slice, std::uint32_t deliveries, std::uint32_t returns) {
    Bucket& bucket =
        buckets[static_cast<std::size_t>(slice - floor_div(slice, kBuckets) * kBuckets)];
    if (bucket.slice != slice) bucket = Bucket{.slice = slice};
    bucket.deliveries += deliveries;
    bucket.returns += returns;
  }

  HealthChange evaluate(const RateLimits& limits, std::int64_t slice) {
    HealthChange change;
    for (const Bucket& bucket : buckets) {
      if (bucket.slice == kNoBucket || slice - bucket.slice >= kBuckets) continue;
      change.deliveries += bucket.deliveries;
      change.returns += bucket.returns;
    }
    if (change.deliveries > 0) {
      change.ratio = static_cast<double>(change.returns) / static_cast<double>(change.deliveries);
    }
    change.outage = change.deliveries > 0 && change.deliveries >= limits.min_deliveries &&
                    change.ratio > limits.outage_ratio;
    change.changed = change.outage != outage;
    outage = change.outage;
    return change;
  }
};

QueueHealth::QueueHealth(std::size_t max_queues)
    : max_queues_(std::max<std::size_t>(max_queues, 1)) {}

QueueHealth::Window& QueueHealth::touch(std::string_view queue) {
  // Reused per thread so that looking a queue up does not allocate.
  thread_local std::string lookup;
  lookup.assign(queue);
  auto it = windows_.find(lookup);
  if (it == windows_.end()) {
    if (windows_.size() >= max_queues_) forget_least_recent();
    it = windows_.emplace(lookup, std::make_shared<Window>()).first;
    it->second->name = &it->first;
  }
  Window* window = it->second.get();
  if (recent_head_ == window) return *window;
  // Unlink (if linked), then put at the head.
  if (window->newer != nullptr) window->newer->older = window->older;
  if (window->older != nullptr) window->older->newer = window->newer;
  if (recent_tail_ == window) recent_tail_ = window->newer;
  window->newer = nullptr;
  window->older = recent_head_;
  if (recent_head_ != nullptr) recent_head_->newer = window;
  recent_head_ = window;
  if (recent_tail_ == nullptr) recent_tail_ = window;
  return *window;
}

void QueueHealth::forget_least_recent() {
  Window* victim = recent_tail_;
  if (victim == nullptr) return;
  recent_tail_ = victim->newer;
  if (recent_tail_ != nullptr)
    recent_tail_->older = nullptr;
  else
    recent_head_ = nullptr;
  windows_.erase(*victim->name);
}

HealthChange QueueHealth::record(std::string_view queue, const RateLimits& limits,
                                 std::int64_t now_ms, std::uint32_t deliveries,
                                 std::uint32_t returns) {
  const std::lock_guard lock(mutex_);
  Window& window = touch(queue);
  window.fit(limits);
  const std::int64_t slice = window.advance(now_ms);
  window.add(slice, deliveries, returns);
  return window.evaluate(limits, slice);
}

HealthChange QueueHealth::on_delivery(std::string_view queue, const RateLimits& limits,
                                      std::int64_t now_ms) {
  return record(queue, limits, now_ms, 1, 0);
}

HealthChange QueueHealth::on_return(std::string_view queue, const RateLimits& limits,
                                    std::int64_t now_ms) {
  return record(queue, limits, now_ms, 0, 1);
}

HealthChange QueueHealth::state(std::string_view queue, const RateLimits& limits,
                                std::int64_t now_ms) {
  const std::lock_guard lock(mutex_);
  // Reading an unknown queue's state should not start tracking it.
  thread_local std::string lookup;
  lookup.assign(queue);
  const auto it = windows_.find(lookup);
  if (it == windows_.end()) return HealthChange{};
  Window& window = *it->second;
  window.fit(limits);
  return window.evaluate(limits, window.advance(now_ms));
}

std::vector<std::string> QueueHealth::queues_in_outage() const {
  const std::lock_guard lock(mutex_);
  std::vector<std::string> names;
  for (const auto& [name, window] : windows_) {
    if (window->outage) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace nackguard::retry
