#pragma once
// The session's channels by number, with the last one looked up remembered. Every frame looks
// its channel up, and consecutive frames are nearly always on the same channel: the remembered
// entry spares the hash map's bucket division and call, a fifth of the session's CPU on a
// stream of publishes (docs/performance.md, The micro-benchmarks). The map's entries do not
// move when it grows, so the remembered pointer stays valid until its entry is erased, which
// only erase() and clear() do, and both forget it.

#include <cstdint>
#include <unordered_map>

#include "proxy/session/channel.hpp"

namespace nackguard::session {

class ChannelTable {
  using Map = std::unordered_map<std::uint16_t, ChannelState>;

 public:
  using iterator = Map::iterator;
  using const_iterator = Map::const_iterator;

  ChannelTable() = default;
  // A copy's remembered entry would be the original's.
  ChannelTable(const ChannelTable&) = delete;
  ChannelTable& operator=(const ChannelTable&) = delete;

  // The channel, created empty if the session has none of that number.
  ChannelState& operator[](std::uint16_t number) {
    if (last_ == nullptr || last_number_ != number) {
      last_ = &map_[number];
      last_number_ = number;
    }
    return *last_;
  }

  iterator find(std::uint16_t number) { return map_.find(number); }
  const_iterator find(std::uint16_t number) const { return map_.find(number); }
  ChannelState& at(std::uint16_t number) { return map_.at(number); }
  iterator begin() { return map_.begin(); }
  iterator end() { return map_.end(); }
  const_iterator begin() const { return map_.begin(); }
  const_iterator end() const { return map_.end(); }
  std::size_t size() const { return map_.size(); }

  void erase(iterator it) {
    last_ = nullptr;
    map_.erase(it);
  }
  void clear() {
    last_ = nullptr;
    map_.clear();
  }

 private:
  Map map_;
  ChannelState* last_ = nullptr;
  std::uint16_t last_number_ = 0;
};

}  // namespace nackguard::session
