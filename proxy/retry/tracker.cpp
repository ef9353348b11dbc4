#include "proxy/retry/tracker.hpp"

#include <sys/mman.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
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

constexpr std::size_t kPageBytes = 4096;
constexpr std::size_t kHugePageBytes = 2 << 20;

std::size_t round_up(std::size_t value, std::size_t unit) {
  return (value + unit - 1) / unit * unit;
}

// Anonymous memory mapped for the tracker alone. Pages are zero until first touched and cost
// nothing before, so a tracker sized for a million entries occupies memory only as it fills.
// A large region is aligned to and advised onto transparent huge pages: at a million entries,
// random access would otherwise pay a TLB miss (a page-table walk) on top of each cache miss.
class Mapping {
 public:
  explicit Mapping(std::size_t bytes)
      : bytes_(round_up(std::max<std::size_t>(bytes, 1), kPageBytes)) {
    const bool huge = bytes_ >= kHugePageBytes;
    const std::size_t mapped = huge ? bytes_ + kHugePageBytes : bytes_;
    void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    start_ = static_cast<char*>(base);
    if (huge) {
      // Trim the slack to start on a 2 MiB boundary, so that every whole 2 MiB can be huge.
      char* aligned = reinterpret_cast<char*>(
          round_up(reinterpret_cast<std::uintptr_t>(start_), kHugePageBytes));
      const auto head = static_cast<std::size_t>(aligned - start_);
      if (head != 0) munmap(start_, head);
      munmap(aligned + bytes_, kHugePageBytes - head);
      start_ = aligned;
      madvise(start_, bytes_, MADV_HUGEPAGE);  // advice only: without THP, 4 KiB pages
    }
  }
  ~Mapping() { munmap(start_, bytes_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* at(std::size_t offset) const { return start_ + offset; }

 private:
  std::size_t bytes_;
  char* start_ = nullptr;
};

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

std::string short_id(const TrackerKey& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(12, '0');
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = kHex[(key.high >> (60 - 4 * i)) & 15];
  return out;
}

// One shard: a pool of nodes threaded on an intrusive LRU list (head = most recently used),
// indexed by an open-addressing table with linear probing. A slot holds the node index plus one
// (zero = empty, so a fresh mapping is an empty table) and the low 32 bits of the key's hash,
// so that most probes compare without touching the node and the home slot of any entry is
// known when deletion shifts entries back (no tombstones).
struct alignas(64) Tracker::Shard {
  struct Node {
    TrackerKey key;
    TrackerEntry entry;
    std::int64_t last_used_ms = 0;
    std::uint32_t prev = kNil;
    std::uint32_t next = kNil;  // also links the free list
  };
  struct Slot {
    std::uint32_t node_plus_one = 0;
    std::uint32_t hash = 0;
    bool empty() const { return node_plus_one == 0; }
    std::uint32_t node() const { return node_plus_one - 1; }
  };

  // Load factor between 1/4 and 1/2.
  static std::size_t slot_count(std::size_t capacity) {
    return std::bit_ceil(std::max<std::size_t>(2 * capacity, 8));
  }

  // The table and the pool live in `memory`, zero-filled: an empty table, and nodes that
  // allocate() constructs. The pool has room for `capacity` nodes from the start, so indices
  // stay valid and nothing is copied under the lock.
  Shard(std::size_t capacity_in, std::shared_ptr<const Mapping> memory_in, std::size_t offset)
      : capacity(capacity_in),
        mask(static_cast<std::uint32_t>(slot_count(capacity) - 1)),
        memory(std::move(memory_in)),
        slots(reinterpret_cast<Slot*>(memory->at(offset))),
        nodes(reinterpret_cast<Node*>(memory->at(offset + bytes_of_slots(capacity)))) {}

  static std::size_t bytes_of_slots(std::size_t capacity) {
    return round_up(slot_count(capacity) * sizeof(Slot), 64);
  }
  static std::size_t bytes(std::size_t capacity) {
    return bytes_of_slots(capacity) + round_up(capacity * sizeof(Node), 64);
  }

  std::uint32_t home(std::uint32_t hash) const { return hash & mask; }

  // The slot holding `key`, or kNil.
  std::uint32_t find_slot(const TrackerKey& key) const {
    const std::uint32_t hash = slot_bits(key);
    for (std::uint32_t i = home(hash);; i = (i + 1) & mask) {
      const Slot& slot = slots[i];
      if (slot.empty()) return kNil;
      if (slot.hash == hash && nodes[slot.node()].key == key) return i;
    }
  }

  void insert_slot(std::uint32_t node, std::uint32_t hash) {
    std::uint32_t i = home(hash);
    while (!slots[i].empty()) i = (i + 1) & mask;
    slots[i] = Slot{node + 1, hash};
  }

  // Backward-shift deletion: later entries of the same cluster move into the hole unless
  // their home lies cyclically in (hole, position].
  void erase_slot(std::uint32_t hole) {
    for (std::uint32_t j = (hole + 1) & mask; !slots[j].empty(); j = (j + 1) & mask) {
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
    std::construct_at(&nodes[used], Node{});
    return used++;
  }

  void remove(std::uint32_t slot) {
    const std::uint32_t n = slots[slot].node();
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
  const std::uint32_t mask;
  std::size_t size = 0;
  std::uint32_t head = kNil;
  std::uint32_t tail = kNil;
  std::uint32_t free_list = kNil;
  std::uint32_t used = 0;  // nodes ever handed out; those below `used` are constructed
  const std::shared_ptr<const Mapping> memory;  // shared by all shards of the tracker
  Slot* const slots;
  Node* const nodes;
  std::uint64_t evictions = 0;
  std::uint64_t expiries = 0;
  mutable std::mutex mutex;
};

Tracker::Tracker(std::size_t max_entries, std::chrono::milliseconds idle_ttl, std::size_t shards)
    : max_entries_(max_entries), idle_ttl_ms_(idle_ttl.count()) {
  // Node and slot indices are 32-bit and a shard's table has twice its capacity in slots, so a
  // shard holds at most 2^30 entries (far more than memory allows anyway).
  const std::size_t limit = std::size_t{1} << 30;
  // No shard may be left without room, so never more shards than entries.
  const std::size_t count = std::clamp<std::size_t>(std::min(shards, max_entries), 1, 4096);
  std::vector<std::size_t> capacities(count);
  std::size_t total_bytes = 0;
  for (std::size_t i = 0; i < count; ++i) {
    // The first max_entries % count shards take one more, so the capacities sum exactly.
    capacities[i] = std::min(max_entries / count + (i < max_entries % count ? 1 : 0), limit);
    total_bytes += Shard::bytes(capacities[i]);
  }
  // One mapping for every shard's table and pool, so that all of it can sit on huge pages.
  const auto memory = std::make_shared<const Mapping>(total_bytes);
  shards_.reserve(count);
  std::size_t offset = 0;
  for (const std::size_t capacity : capacities) {
    shards_.push_back(std::make_unique<Shard>(capacity, memory, offset));
    offset += Shard::bytes(capacity);
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
  if (slot != kNil && shard.expired(shard.nodes[shard.slots[slot].node()], now_ms, idle_ttl_ms_)) {
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

  const std::uint32_t n = shard.slots[slot].node();
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
  const auto& node = shard.nodes[shard.slots[slot].node()];
  if (shard.expired(node, now_ms, idle_ttl_ms_)) {
    shard.remove(slot);
    ++shard.expiries;
    return std::nullopt;
  }
  return node.entry;
}

bool Tracker::update_if_present(const TrackerKey& key, std::int64_t now_ms,
                                const std::function<void(TrackerEntry&)>& update) {
  Shard& shard = shard_for(key);
  const std::lock_guard lock(shard.mutex);
  const std::uint32_t slot = shard.find_slot(key);
  if (slot == kNil) return false;
  auto& node = shard.nodes[shard.slots[slot].node()];
  if (shard.expired(node, now_ms, idle_ttl_ms_)) return false;
  update(node.entry);
  return true;
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

std::vector<Tracker::Sampled> Tracker::top(std::size_t n, std::size_t visit_per_shard,
                                           std::int64_t now_ms, std::size_t* visited) const {
  // Most returns first; of equal counts, the latest last return.
  auto before = [](const Sampled& a, const Sampled& b) {
    if (a.entry.returns != b.entry.returns) return a.entry.returns > b.entry.returns;
    return a.entry.last_return_ms > b.entry.last_return_ms;
  };
  std::vector<Sampled> best;  // a heap whose front is the worst kept
  best.reserve(n + 1);
  std::size_t read = 0;
  for (const auto& shard : shards_) {
    const std::lock_guard lock(shard->mutex);
    std::uint32_t node = shard->head;
    for (std::size_t i = 0; i < visit_per_shard && node != kNil; ++i) {
      const Shard::Node& current = shard->nodes[node];
      node = current.next;
      ++read;
      if (n == 0 || shard->expired(current, now_ms, idle_ttl_ms_)) continue;
      best.push_back(Sampled{current.key, current.entry});
      std::push_heap(best.begin(), best.end(), before);
      if (best.size() > n) {
        std::pop_heap(best.begin(), best.end(), before);
        best.pop_back();
      }
    }
  }
  std::sort_heap(best.begin(), best.end(), before);
  if (visited != nullptr) *visited = read;
  return best;
}

}  // namespace nackguard::retry
