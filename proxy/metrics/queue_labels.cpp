#include "proxy/metrics/queue_labels.hpp"

#include <algorithm>
#include <mutex>

#include "proxy/metrics/metric_list.hpp"

namespace nackguard::metrics {

std::size_t QueueLabels::index(std::string_view queue) {
  {
    std::shared_lock lock(mutex_);
    auto it = indices_.find(queue);
    if (it != indices_.end()) return it->second;
  }
  // Once full, an unknown queue never takes the exclusive lock.
  if (queue != kOtherQueue && !full_.load(std::memory_order_relaxed)) {
    std::unique_lock lock(mutex_);
    auto it = indices_.find(queue);
    if (it != indices_.end()) return it->second;
    if (indices_.size() < max_) {
      const std::size_t index = indices_.size();
      indices_.emplace(std::string(queue), index);
      if (indices_.size() == max_) full_.store(true, std::memory_order_relaxed);
      return index;
    }
    full_.store(true, std::memory_order_relaxed);
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
