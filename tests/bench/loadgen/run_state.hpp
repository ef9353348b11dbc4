#pragma once
// What the publishing and consuming threads share: progress counters, the abort flag, and the
// layout of a message body (send time and sequence number in its first 16 bytes).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>

namespace nackguard::bench {

using Clock = std::chrono::steady_clock;

struct Progress {
  std::atomic<std::uint64_t> published{0};
  std::atomic<std::uint64_t> confirmed{0};
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<std::uint64_t> acked{0};
  std::atomic<bool> abort{false};

  // Changes whenever anything moves; the stall watchdog compares it.
  std::uint64_t moved() const {
    return published.load(std::memory_order_relaxed) + confirmed.load(std::memory_order_relaxed) +
           delivered.load(std::memory_order_relaxed) + acked.load(std::memory_order_relaxed);
  }
  bool aborted() const { return abort.load(std::memory_order_relaxed); }
};

// The first 16 bytes of every body: when it was published (steady clock, ns) and which
// message it is (queue index in the top 24 bits, sequence in the queue below).
struct Stamp {
  std::int64_t sent_ns = 0;
  std::uint64_t id = 0;
};
constexpr std::size_t kStampBytes = 16;

inline std::uint64_t message_id(std::uint32_t queue_index, std::uint64_t sequence) {
  return (static_cast<std::uint64_t>(queue_index) << 40) | sequence;
}
inline std::uint64_t sequence_of(std::uint64_t id) {
  return id & ((std::uint64_t{1} << 40) - 1);
}

inline void write_stamp(std::uint8_t* body, const Stamp& stamp) {
  std::memcpy(body, &stamp.sent_ns, 8);
  std::memcpy(body + 8, &stamp.id, 8);
}
inline Stamp read_stamp(const void* body) {
  Stamp stamp;
  std::memcpy(&stamp.sent_ns, body, 8);
  std::memcpy(&stamp.id, static_cast<const std::uint8_t*>(body) + 8, 8);
  return stamp;
}

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Whether the first delivery of message `id` is nacked: the same messages on every target.
inline bool chosen_for_nack(std::uint64_t id, double fraction) {
  if (fraction <= 0) return false;
  std::uint64_t x = id + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<double>(x >> 11) * 0x1.0p-53 < fraction;
}

}  // namespace nackguard::bench
