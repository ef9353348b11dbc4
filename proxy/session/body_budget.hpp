#pragma once
// The budget of message bytes the proxy may keep in memory across all connections: bodies it
// may have to republish, and deliveries it holds back from a client. Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>

#include "proxy/amqp/bytes.hpp"

namespace nackguard::session {

class BodyBudget {
 public:
  explicit BodyBudget(std::uint64_t limit) : limit_(limit) {}

  // Reserves `bytes`; false (and nothing reserved) if that would pass the limit.
  bool try_reserve(std::uint64_t bytes) {
    std::uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ || used > limit_ - bytes) {
        refusals_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }
  void release(std::uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  std::uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  std::uint64_t limit() const { return limit_; }
  std::uint64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }

 private:
  std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
  std::atomic<std::uint64_t> refusals_{0};
};

// A message body counted against a BodyBudget for as long as it lives.
class RetainedBody {
 public:
  // What one retained body costs besides its bytes, so that the budget bounds real memory:
  // this object and the shared_ptr's control block (two heap blocks), and malloc's header and
  // 16-byte rounding of those and of the byte buffer (glibc, 64-bit: 48 + 32 + 16).
  static constexpr std::uint64_t kOverheadBytes = 96;

  // Reserves `size` bytes plus kOverheadBytes. The caller that fills `bytes` frame by frame
  // should reserve `size` in it first, or vector growth may allocate up to twice that.
  static std::shared_ptr<RetainedBody> make(BodyBudget* budget, std::uint64_t size) {
    const std::uint64_t cost =
        size <= UINT64_MAX - kOverheadBytes ? size + kOverheadBytes : UINT64_MAX;
    if (budget && !budget->try_reserve(cost)) return nullptr;
    auto body = std::shared_ptr<RetainedBody>(new RetainedBody(budget, cost));
    return body;
  }
  ~RetainedBody() {
    if (budget_) budget_->release(reserved_);
  }
  RetainedBody(const RetainedBody&) = delete;
  RetainedBody& operator=(const RetainedBody&) = delete;

  amqp::Bytes bytes;

 private:
  RetainedBody(BodyBudget* budget, std::uint64_t reserved) : budget_(budget), reserved_(reserved) {}
  BodyBudget* budget_;
  std::uint64_t reserved_;
};

}  // namespace nackguard::session
