#include "proxy/metrics/queue_labels.hpp"

#include <algorithm>
#include <mutex>

#include "proxy/metrics/metric_list.hpp"

namespace nackguard::metrics {

std::size_t QueueLabels::index(std::string_view queue) {
  // Read before the lookup: the map never changes once full, so a miss while it already was
  // is final. A miss seen before it filled is checked again under the exclusive lock, since
  // another caller may have given this very queue the last slot in between.
  const bool was_full = full_.load(std::memory_order_acquire);
  {
    std::shared_lock lock(mutex_);
    auto it = indices_.find(queue);
    if (it != indices_.end()) return it->second;
  }
  if (queue != kOtherQueue && !was_full) {
    std::unique_lock lock(mutex_);
    auto it = indices_.find(queue);
    if (it != indices_.end()) return it->second;
    if (indices_.size() < max_) {
      const std::size_t index = indices_.size();
      indices_.emplace(std::string(queue), index);
      if (indices_.size() == max_) full_.store(true, std::memory_order_release);
      return index;
    }
    full_.store(true, std::memory_order_release);
  }
  other_used_.store(true, std::memory_order_relaxed);
  return max_;
}

std::vector<QueueLabels::Entry> QueueLabels::snapshot() const {
  std::vector<Entry> entries;
  {
    std::shared_lock lock(mutex_);
    entries.reserve(indices_.size() + 1);
    for (const auto& [name, index] : indices_) entries.push_back({name, index});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  if (other_used_.load(std::memory_order_relaxed)) {
    entries.push_back({std::string(kOtherQueue), max_});
  }
  return entries;
}

}  // namespace nackguard::metrics
