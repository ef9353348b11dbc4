#pragma once
// The budget of message bytes the proxy may keep in memory across all connections: bodies it
// may have to republish, deliveries it holds back from a client, and the records of unacked
// deliveries (their content headers included). Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "proxy/amqp/bytes.hpp"

namespace nackguard::retry {

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
  // Whether `bytes` more fit now; counts a refusal if not. For a caller that then charges
  // them with force_reserve: across threads the limit may be passed by what each charged
  // between its check and its charge (one delivery record each).
  bool has_room(std::uint64_t bytes) {
    std::uint64_t used = used_.load(std::memory_order_relaxed);
    if (bytes <= limit_ && used <= limit_ - bytes) return true;
    refusals_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Reserves `bytes` whatever the limit: memory already in use, now counted.
  void force_reserve(std::uint64_t bytes) { used_.fetch_add(bytes, std::memory_order_relaxed); }
  // A delivery was forwarded without a record, the budget being full.
  void note_untracked() { untracked_.fetch_add(1, std::memory_order_relaxed); }

  std::uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  std::uint64_t limit() const { return limit_; }
  std::uint64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }
  std::uint64_t untracked() const { return untracked_.load(std::memory_order_relaxed); }

 private:
  std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
  std::atomic<std::uint64_t> refusals_{0};
  std::atomic<std::uint64_t> untracked_{0};
};

// Bytes one owner charged to a BodyBudget (with force_reserve), given back when it goes.
// Movable, not copyable; without a budget it counts nothing.
class BudgetCharge {
 public:
  BudgetCharge() = default;
  explicit BudgetCharge(BodyBudget* budget) : budget_(budget) {}
  BudgetCharge(BudgetCharge&& other) noexcept
      : budget_(other.budget_), bytes_(std::exchange(other.bytes_, 0)) {}
  BudgetCharge& operator=(BudgetCharge&& other) noexcept {
    if (this != &other) {
      release_all();
      budget_ = other.budget_;
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  BudgetCharge(const BudgetCharge&) = delete;
  BudgetCharge& operator=(const BudgetCharge&) = delete;
  ~BudgetCharge() { release_all(); }

  BodyBudget* budget() const { return budget_; }
  void add(std::uint64_t bytes) {
    if (!budget_) return;
    budget_->force_reserve(bytes);
    bytes_ += bytes;
  }
  void sub(std::uint64_t bytes) {
    if (!budget_) return;
    budget_->release(bytes);
    bytes_ -= bytes;
  }
  std::uint64_t bytes() const { return bytes_; }

 private:
  void release_all() {
    if (budget_ && bytes_ != 0) budget_->release(bytes_);
    bytes_ = 0;
  }
  BodyBudget* budget_ = nullptr;
  std::uint64_t bytes_ = 0;
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

}  // namespace nackguard::retry
