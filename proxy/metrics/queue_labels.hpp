#pragma once
// The queue label's values: each queue name gets a small index, the first `max` distinct names
// their own and every later one the shared "_other" index, so the number of series stays
// bounded however many queues (server-named ones included) come and go. Thread-safe; a known
// name costs one shared lock and one hash lookup.

#include <atomic>
#include <cstddef>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nackguard::metrics {

class QueueLabels {
 public:
  explicit QueueLabels(std::size_t max) : max_(max) {}

  // The index of `queue`: below max() for a queue with its own label value, max() for
  // "_other". A queue named "_other" shares that index: the two would render alike anyway.
  std::size_t index(std::string_view queue);

  std::size_t max() const { return max_; }
  std::size_t other_index() const { return max_; }
  // Slots a per-queue array needs: max() queues plus "_other".
  std::size_t slots() const { return max_ + 1; }

  struct Entry {
    std::string name;
    std::size_t index;
  };
  // Every queue seen, sorted by name, then "_other" if any queue was sent there.
  std::vector<Entry> snapshot() const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  const std::size_t max_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::size_t, Hash, std::equal_to<>> indices_;
  std::atomic<bool> full_{false};
  std::atomic<bool> other_used_{false};
};

}  // namespace nackguard::metrics
