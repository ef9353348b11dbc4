#include "proxy/retry/tracker.hpp"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

namespace nackguard::retry {
namespace {

constexpr std::uint32_t kNil = std::numeric_limits<std::uint32_t>::max();
constexpr std::size_t kStackKeyBytes = 512;

// Which shard a key lives in, and where its probe sequence starts inside that shard, come from
// different halves of the hash so that they are independent.
std::size_t shard_bits(const TrackerKey& key) {
  return static_cast<std::size_t>(key.high >> 32);
}
std::uint32_t slot_bits(const TrackerKey& key) {
  return static_cast<std::uint32_t>(key.low);
}

}  // namespace

TrackerKey make_key(std::string_view queue, std::string_view identity) {
  const std::size_t size = queue.size() + 1 + identity.size();
  XXH128_hash_t hash;
  if (size <= kStackKeyBytes) {
    std::array<char, kStackKeyBytes> buffer;
    std::memcpy(buffer.data(), queue.data(), queue.size());
    buffer[queue.size()] = '\0';
    std::memcpy(buffer.data() + queue.size() + 1, identity.data(), identity.size());
    hash = XXH3_128bits(buffer.data(), size);
  } else {
    std::string joined;
    joined.reserve(size);
    joined.append(queue).push_back('\0');
    joined.append(identity);
    hash = XXH3_128bits(joined.data(), joined.size());
  }
  return TrackerKey{hash.high64, hash.low64};
}

// One shard: a pool of nodes threaded on an intrusive LRU list (head = most recently used),
// indexed by an open-addressing table with linear probing. A slot holds the node index and the
// low 32 bits of the key's hash, so that most probes compare without touching the node and the
// home slot of any entry is known when deletion shifts entries back (no tombstones).
struct alignas(64) Tracker::Shard {
  struct Node {
    TrackerKey key;
    TrackerEntry entry;
    std::int64_t last_used_ms = 0;
    std::uint32_t prev = kNil;
    std::uint32_t next = kNil;  // also links the free list
  };
  struct Slot {
    std::uint32_t node = kNil;
    std::uint32_t hash = 0;
  };

  explicit Shard(std::size_t capacity_in) : capacity(capacity_in) {
    // Load factor between 1/4 and 1/2; the pool is reserved once so that indices stay valid
    // and no growth copies happen under the lock. Untouched pages cost nothing.
    slots.resize(std::bit_ceil(std::max<std::size_t>(2 * capacity, 8)));
    mask = static_cast<std::uint32_t>(slots.size() - 1);
    nodes.reserve(capacity);
  }

  std::uint32_t home(std::uint32_t hash) const { return hash & mask; }

  // The slot holding `key`, or kNil.
  std::uint32_t find_slot(const TrackerKey& key) const {
    const std::uint32_t hash = slot_bits(key);
    for (std::uint32_t i = home(hash);; i = (i + 1) & mask) {
      const Slot& slot = slots[i];
      if (slot.node == kNil) return kNil;
      if (slot.hash == hash && nodes[slot.node].key == key) return i;
    }
  }

  void insert_slot(std::uint32_t node, std::uint32_t hash) {
    std::uint32_t i = home(hash);
    while (slots[i].node != kNil) i = (i + 1) & mask;
    slots[i] = Slot{node, hash};
  }

  // Backward-shift deletion: later entries of the same cluster move into the hole unless
  // their home lies cyclically in (hole, position].
  void erase_slot(std::uint32_t hole) {
    for (std::uint32_t j = (hole + 1) & mask; slots[j].node != kNil; j = (j + 1) & mask) {
      const std::uint32_t k = home(slots[j].hash);
      const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
      if (stays) continue;
      slots[hole] = slots[j];
      hole = j;
    }
    slots[hole] = Slot{};
  }

  void unlink(std::uint32_t n) {
    Node& node = nodes[n];
    if (node.prev != kNil)
      nodes[node.prev].next = node.next;
    else
      head = node.next;
    if (node.next != kNil)
      nodes[node.next].prev = node.prev;
    else
      tail = node.prev;
    node.prev = node.next = kNil;
  }

  void push_front(std::uint32_t n) {
    Node& node = nodes[n];
    node.prev = kNil;
    node.next = head;
    if (head != kNil) nodes[head].prev = n;
    head = n;
    if (tail == kNil) tail = n;
  }

  std::uint32_t allocate() {
    if (free_list != kNil) {
      const std::uint32_t n = free_list;
      free_list = nodes[n].next;
      return n;
    }
    nodes.emplace_back();
    return static_cast<std::uint32_t>(nodes.size() - 1);
  }

  void remove(std::uint32_t slot) {
    const std::uint32_t n = slots[slot].node;
    erase_slot(slot);
    unlink(n);
    nodes[n] = Node{};
    nodes[n].next = free_list;
    free_list = n;
    --size;
  }

  bool expired(const Node& node, std::int64_t now_ms, std::int64_t ttl_ms) const {
    return ttl_ms > 0 && now_ms - node.last_used_ms > ttl_ms;
  }

  // Drops expired entries from the cold end, a couple per call so no caller pays for a
  // backlog; lookups treat any other expired entry as absent.
  void trim_expired_tail(std::int64_t now_ms, std::int64_t ttl_ms) {
    for (int i = 0; i < 2 && tail != kNil && expired(nodes[tail], now_ms, ttl_ms); ++i) {
      remove(find_slot(nodes[tail].key));
      ++expiries;
    }
  }

  const std::size_t capacity;
  std::size_t size = 0;
  std::uint32_t mask = 0;
  std::uint32_t head = kNil;
  std::uint32_t tail = kNil;
  std::uint32_t free_list = kNil;
  std::vector<Node> nodes;
  std::vector<Slot> slots;
  std::uint64_t evictions = 0;
  std::uint64_t expiries = 0;
  mutable std::mutex mutex;
};

Tracker::Tracker(std::size_t max_entries, std::chrono::milliseconds idle_ttl, std::size_t shards)
    : max_entries_(max_entries), idle_ttl_ms_(idle_ttl.count()) {
  // Node indices are 32-bit; kNil is reserved.
  const std::size_t limit = std::numeric_limits<std::uint32_t>::max() - 1;
  // No shard may be left without room, so never more shards than entries.
  const std::size_t count = std::clamp<std::size_t>(std::min(shards, max_entries), 1, 4096);
  shards_.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    // The first max_entries % count shards take one more, so the capacities sum exactly.
    const std::size_t capacity = max_entries / count + (i < max_entries % count ? 1 : 0);
    shards_.push_back(std::make_unique<Shard>(std::min(capacity, limit)));
  }
}

Tracker::~Tracker() = default;

Tracker::Shard& Tracker::shard_for(const TrackerKey& key) {
  return *shards_[shard_bits(key) % shards_.size()];
}

TrackerEntry Tracker::upsert(const TrackerKey& key, std::int64_t now_ms,
                             const std::function<void(TrackerEntry&)>& update) {
  Shard& shard = shard_for(key);
  const std::lock_guard lock(shard.mutex);
  shard.trim_expired_tail(now_ms, idle_ttl_ms_);

  std::uint32_t slot = shard.find_slot(key);
  if (slot != kNil && shard.expired(shard.nodes[shard.slots[slot].node], now_ms, idle_ttl_ms_)) {
    shard.remove(slot);
    ++shard.expiries;
    slot = kNil;
  }

  if (slot == kNil) {
    if (shard.capacity == 0) {
      TrackerEntry entry;
      update(entry);
      return entry;
    }
    if (shard.size == shard.capacity) {
      shard.remove(shard.find_slot(shard.nodes[shard.tail].key));
      ++shard.evictions;
    }
    const std::uint32_t n = shard.allocate();
    shard.nodes[n].key = key;
    shard.insert_slot(n, slot_bits(key));
    shard.push_front(n);
    ++shard.size;
    shard.nodes[n].last_used_ms = now_ms;
    update(shard.nodes[n].entry);
    return shard.nodes[n].entry;
  }

  const std::uint32_t n = shard.slots[slot].node;
  shard.nodes[n].last_used_ms = now_ms;
  update(shard.nodes[n].entry);
  if (shard.head != n) {
    shard.unlink(n);
    shard.push_front(n);
  }
  return shard.nodes[n].entry;
}

std::optional<TrackerEntry> Tracker::find(const TrackerKey& key, std::int64_t now_ms) {
  Shard& shard = shard_for(key);
  const std::lock_guard lock(shard.mutex);
  const std::uint32_t slot = shard.find_slot(key);
  if (slot == kNil) return std::nullopt;
  const auto& node = shard.nodes[shard.slots[slot].node];
  if (shard.expired(node, now_ms, idle_ttl_ms_)) {
    shard.remove(slot);
    ++shard.expiries;
    return std::nullopt;
  }
  return node.entry;
}

void Tracker::erase(const TrackerKey& key) {
  Shard& shard = shard_for(key);
  const std::lock_guard lock(shard.mutex);
  const std::uint32_t slot = shard.find_slot(key);
  if (slot != kNil) shard.remove(slot);
}

TrackerStats Tracker::stats() const {
  TrackerStats total;
  for (const auto& shard : shards_) {
    const std::lock_guard lock(shard->mutex);
    total.entries += shard->size;
    total.evictions += shard->evictions;
    total.expiries += shard->expiries;
  }
  return total;
}

}  // namespace nackguard::retry
