#include "proxy/net/address_picker.hpp"

#include <stdexcept>

namespace nackguard::net {

AddressPicker::AddressPicker(std::size_t count, Now now) : now_(std::move(now)), slots_(count) {
  if (count == 0) throw std::invalid_argument("AddressPicker needs at least one address");
}

bool AddressPicker::skipped_locked(const Slot& slot, Clock::time_point now) const {
  return slot.failed_at && now - *slot.failed_at < kSkipAfterFailure;
}

std::vector<std::size_t> AddressPicker::plan() {
  const Clock::time_point now = now_();
  std::lock_guard lock(mutex_);
  std::vector<std::size_t> usable;
  usable.reserve(slots_.size());
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (!skipped_locked(slots_[i], now)) usable.push_back(i);
  }
  const std::size_t turn = next_++;
  if (usable.empty()) {
    std::size_t oldest = 0;
    for (std::size_t i = 1; i < slots_.size(); ++i) {
      if (*slots_[i].failed_at < *slots_[oldest].failed_at) oldest = i;
    }
    return {oldest};
  }
  // Rotate over the usable addresses only, so that a skipped node's share is spread evenly
  // over the others instead of going to its neighbour in the list.
  std::vector<std::size_t> order;
  order.reserve(usable.size());
  const std::size_t start = turn % usable.size();
  for (std::size_t k = 0; k < usable.size(); ++k)
    order.push_back(usable[(start + k) % usable.size()]);
  return order;
}

void AddressPicker::failed(std::size_t index) {
  const Clock::time_point now = now_();
  std::lock_guard lock(mutex_);
  if (index < slots_.size()) slots_[index].failed_at = now;
}

void AddressPicker::succeeded(std::size_t index) {
  std::lock_guard lock(mutex_);
  if (index < slots_.size()) slots_[index].failed_at.reset();
}

bool AddressPicker::skipped(std::size_t index) const {
  const Clock::time_point now = now_();
  std::lock_guard lock(mutex_);
  return index < slots_.size() && skipped_locked(slots_[index], now);
}

}  // namespace nackguard::net
