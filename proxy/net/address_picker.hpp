#pragma once
// Which upstream addresses a new client connection tries, and in which order. No sockets: the
// connecting code (upstream_connect.cpp) asks for a plan, tries it, and reports each result.
//
// - Connections spread over the nodes: each plan starts one address further on.
// - An address whose connect just failed is skipped for kSkipAfterFailure, so that clients are
//   not held up by a node known to be down.
// - When every address is skipped, the one that failed longest ago is still tried: a client is
//   never turned away without a connect attempt, and a node that is back is found at once.
// Thread-safe: the relays of all worker threads share one picker.

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

namespace nackguard::net {

class AddressPicker {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;
  static constexpr std::chrono::seconds kSkipAfterFailure{5};

  // `count` addresses, at least one; `now` is the clock (tests inject theirs).
  explicit AddressPicker(std::size_t count, Now now = &Clock::now);

  std::size_t size() const { return slots_.size(); }

  // The indices to try, in order, for one connection.
  std::vector<std::size_t> plan();
  // A connect to `index` failed (every IP it resolves to, or its TLS handshake): skip it for a
  // while.
  void failed(std::size_t index);
  // A connect to `index` succeeded: it is not skipped any more.
  void succeeded(std::size_t index);
  // Whether plan() leaves `index` out now (unless every address is left out).
  bool skipped(std::size_t index) const;

 private:
  struct Slot {
    std::optional<Clock::time_point> failed_at;  // the last failure not followed by a success
  };
  bool skipped_locked(const Slot& slot, Clock::time_point now) const;

  Now now_;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
  std::size_t next_ = 0;  // advances by one per plan()
};

}  // namespace nackguard::net
