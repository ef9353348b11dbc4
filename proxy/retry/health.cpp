#include "proxy/retry/health.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace nackguard::retry {
namespace {

constexpr std::int64_t kBuckets = 20;
constexpr std::int64_t kNoBucket = std::numeric_limits<std::int64_t>::min();
// Windows looked at, least recently seen first, to free stale hashes when max_messages is hit.
constexpr int kWindowsSweptWhenFull = 4;

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

std::int64_t bucket_width_ms(const RateLimits& limits) {
  return std::max<std::int64_t>(limits.window.count() / kBuckets, 1);
}

}  // namespace

// A ring of buckets, each counting the messages of one window/20 slice of time, tagged with
// the slice's number. A bucket is emptied when the window slides past it; the message hashes
// it counted then stop being "seen in the window".
struct QueueHealth::Window {
  struct Bucket {
    std::int64_t slice = kNoBucket;
    std::uint32_t messages = 0;
    std::uint32_t returned = 0;
    std::vector<std::uint64_t> hashes;  // the seen messages counted in this bucket
  };
  // The slices in which a message was last counted as delivered and as returned.
  struct Seen {
    std::int64_t delivered = kNoBucket;
    std::int64_t returned = kNoBucket;
  };

  explicit Window(std::size_t& held_messages) : held(held_messages) {}
  ~Window() { reset(); }

  std::array<Bucket, kBuckets> buckets;
  std::unordered_map<std::uint64_t, Seen> seen;
  std::size_t& held;  // QueueHealth::messages_
  std::int64_t width_ms = 0;
  std::int64_t latest_slice = kNoBucket;
  bool outage = false;
  bool overdue = false;
  std::int64_t outage_since_ms = 0;
  const std::string* name = nullptr;  // the key of this window in windows_
  Window* newer = nullptr;
  Window* older = nullptr;

  Bucket& bucket(std::int64_t slice) {
    return buckets[static_cast<std::size_t>(slice - floor_div(slice, kBuckets) * kBuckets)];
  }
  bool live(std::int64_t slice) const {
    return slice != kNoBucket && latest_slice - slice < kBuckets;
  }

  void clear(Bucket& b) {
    for (const std::uint64_t hash : b.hashes) {
      const auto it = seen.find(hash);
      if (it == seen.end()) continue;
      if (it->second.delivered == b.slice) it->second.delivered = kNoBucket;
      if (it->second.returned == b.slice) it->second.returned = kNoBucket;
      if (it->second.delivered == kNoBucket && it->second.returned == kNoBucket) seen.erase(it);
    }
    held -= b.hashes.size();
    b.hashes.clear();
    if (b.hashes.capacity() > 256) b.hashes.shrink_to_fit();
    b.slice = kNoBucket;
    b.messages = b.returned = 0;
  }

  void reset() {
    for (Bucket& b : buckets) clear(b);
    seen.clear();
    latest_slice = kNoBucket;
  }

  // Starts over when the policy's window changed: old slices no longer line up.
  void fit(const RateLimits& limits) {
    const std::int64_t width = bucket_width_ms(limits);
    if (width == width_ms) return;
    reset();
    width_ms = width;
  }

  // The slice events at `now_ms` count in; buckets the window slid past are emptied. Time never
  // runs backwards here: threads report slightly out of order, and an early event simply
  // counts in the latest slice.
  std::int64_t advance(std::int64_t now_ms) {
    const std::int64_t slice = floor_div(now_ms, width_ms);
    if (latest_slice != kNoBucket && slice > latest_slice) {
      const std::int64_t from = std::max(latest_slice + 1, slice - kBuckets + 1);
      for (std::int64_t s = from; s <= slice; ++s) clear(bucket(s));
    }
    latest_slice = std::max(latest_slice, slice);
    return latest_slice;
  }

  Bucket& current() {
    Bucket& b = bucket(latest_slice);
    if (b.slice != latest_slice) {
      clear(b);
      b.slice = latest_slice;
    }
    return b;
  }

  HealthChange evaluate(const RateLimits& limits, std::int64_t now_ms, bool commit) {
    HealthChange change;
    for (const Bucket& b : buckets) {
      if (!live(b.slice)) continue;
      change.messages += b.messages;
      change.returned += b.returned;
    }
    if (change.messages > 0) {
      change.ratio = std::min(
          1.0, static_cast<double>(change.returned) / static_cast<double>(change.messages));
    }
    const std::uint64_t minimum = std::max<std::uint32_t>(limits.min_messages, 1);
    const bool enter = change.messages >= minimum && change.ratio > limits.outage_ratio;
    const bool stay = change.messages > 0 && change.messages * 2 >= minimum &&
                      change.ratio > limits.outage_ratio * kLeaveFactor;
    change.outage = outage ? stay : enter;
    change.changed = change.outage != outage;
    const std::int64_t since = change.outage && !outage ? now_ms : outage_since_ms;
    if (change.outage) {
      change.outage_ms = std::max<std::int64_t>(now_ms - since, 0);
      change.overdue = change.outage_ms >= limits.max_outage.count();
      change.became_overdue = change.overdue && !overdue;
    }
    if (commit) {
      outage = change.outage;
      outage_since_ms = since;
      overdue = change.overdue;
    }
    return change;
  }
};

QueueHealth::QueueHealth(std::size_t max_queues, std::size_t max_messages)
    : max_queues_(std::max<std::size_t>(max_queues, 1)), max_messages_(max_messages) {}

QueueHealth::~QueueHealth() = default;

QueueHealth::Window& QueueHealth::touch(std::string_view queue) {
  // Reused per thread so that looking a queue up does not allocate.
  thread_local std::string lookup;
  lookup.assign(queue);
  auto it = windows_.find(lookup);
  if (it == windows_.end()) {
    if (windows_.size() >= max_queues_) forget_least_recent();
    it = windows_.emplace(lookup, std::make_unique<Window>(messages_)).first;
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

bool QueueHealth::reserve_message(std::int64_t now_ms) {
  if (messages_ >= max_messages_) {
    // Quiet queues may still hold hashes their windows slid past: empty those buckets.
    Window* window = recent_tail_;
    for (int i = 0; i < kWindowsSweptWhenFull && window != nullptr; ++i, window = window->newer) {
      if (window->width_ms > 0) window->advance(now_ms);
    }
  }
  if (messages_ >= max_messages_) return false;
  ++messages_;
  return true;
}

HealthChange QueueHealth::record(std::string_view queue, const RateLimits& limits,
                                 std::int64_t now_ms, Event event, std::uint64_t message) {
  const std::lock_guard lock(mutex_);
  Window& window = touch(queue);
  window.fit(limits);
  window.advance(now_ms);
  const auto evaluate = [&] {
    const HealthChange change = window.evaluate(limits, now_ms, true);
    if (change.became_overdue) ++max_outage_reached_;
    return change;
  };
  Window::Bucket& bucket = window.current();
  auto& counter = event == Event::seen_return ? bucket.returned : bucket.messages;
  if (event == Event::delivery) {
    ++bucket.messages;  // a first delivery is a message not seen before
    return evaluate();
  }
  const auto it = window.seen.find(message);
  if (it != window.seen.end()) {
    const Window::Seen& seen = it->second;
    // A message delivered or returned in the window was delivered in it: counted already.
    const bool counted = event == Event::seen_return
                             ? window.live(seen.returned)
                             : window.live(seen.delivered) || window.live(seen.returned);
    if (counted) return evaluate();
  }
  if (reserve_message(now_ms)) {
    Window::Seen& seen = window.seen[message];
    (event == Event::seen_return ? seen.returned : seen.delivered) = window.latest_slice;
    bucket.hashes.push_back(message);
  } else {
    ++messages_dropped_;  // counted as a message not seen before
  }
  ++counter;
  return evaluate();
}

HealthChange QueueHealth::on_delivery(std::string_view queue, const RateLimits& limits,
                                      std::int64_t now_ms, std::optional<std::uint64_t> message) {
  return record(queue, limits, now_ms, message ? Event::seen_delivery : Event::delivery,
                message.value_or(0));
}

HealthChange QueueHealth::on_return(std::string_view queue, const RateLimits& limits,
                                    std::int64_t now_ms, std::uint64_t message) {
  return record(queue, limits, now_ms, Event::seen_return, message);
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
  window.advance(now_ms);
  return window.evaluate(limits, now_ms, false);
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

HealthStats QueueHealth::stats() const {
  const std::lock_guard lock(mutex_);
  return {windows_.size(), messages_, messages_dropped_, max_outage_reached_};
}

}  // namespace nackguard::retry
