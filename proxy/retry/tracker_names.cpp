#include "proxy/retry/tracker_names.hpp"

namespace nackguard::retry {

namespace {

std::string cut(std::string_view identity) {
  if (identity.size() <= kMaxIdentityBytes) return std::string(identity);
  return std::string(identity.substr(0, kMaxIdentityBytes - 3)) + "...";
}

}  // namespace

void TrackerNames::record(const TrackerKey& key, std::string_view queue,
                          std::string_view identity) {
  if (capacity_ == 0) return;
  TrackerName name{std::string(queue), keep_identities() ? cut(identity) : std::string()};
  const std::lock_guard lock(mutex_);
  if (auto found = index_.find(key); found != index_.end()) {
    found->second->second = std::move(name);
    order_.splice(order_.begin(), order_, found->second);
    return;
  }
  if (order_.size() == capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
  order_.emplace_front(key, std::move(name));
  index_.emplace(key, order_.begin());
}

std::optional<TrackerName> TrackerNames::find(const TrackerKey& key) const {
  const std::lock_guard lock(mutex_);
  auto found = index_.find(key);
  if (found == index_.end()) return std::nullopt;
  TrackerName name = found->second->second;
  if (!keep_identities()) name.identity.clear();
  return name;
}

std::size_t TrackerNames::size() const {
  const std::lock_guard lock(mutex_);
  return order_.size();
}

}  // namespace nackguard::retry
