#pragma once
// What crosses the seam between the session and the guard when the guard takes a delivery over:
// values, never callbacks. The guard decides (a delivery or a return in, a TakeOver out); the
// session carries the TakeOver with the delivery, publishes its copy on the proxy's channel,
// and hands the copy's outcome back (an Outcome in, a Settle out) at a moment the settlement
// can be written at once. The guard keeps nothing of a delivery in between: the Ticket is its
// memory of it.

#include <cstdint>
#include <optional>
#include <string>

#include "proxy/retry/decision.hpp"
#include "proxy/retry/fallback.hpp"
#include "proxy/retry/tracker.hpp"
#include "proxy/session/delivery.hpp"

namespace nackguard::session {

// The guard's record of a delivery it owns, from its decision to its settlement.
struct Ticket {
  std::uint16_t channel = 0;
  std::uint64_t broker_tag = 0;
  // Its copy's number on this connection; 0 when there is no copy (a dead-letter through the
  // broker's own reject, or a copy that could not be built).
  std::uint64_t job = 0;
  std::string queue;
  retry::TrackerKey key;
  std::string identity;
  retry::Decision decision;
  SettleKind fallback = SettleKind::nack;  // how the delivery is given back if the copy fails
  // Dead-lettered by the broker (`via: reject`): rejected without requeue, no copy.
  bool via_reject = false;
};

// How a take-over ended, for the guard to settle: the copy's outcome from the proxy's channel
// (failure none: confirmed), or, without a copy, at once (why the copy could not be built).
struct Outcome {
  Ticket ticket;
  retry::FallbackCause failure = retry::FallbackCause::none;
  std::string why;
};

// A settlement, by the proxy, of a delivery it took over.
struct Settle {
  std::uint16_t channel = 0;
  std::uint64_t broker_tag = 0;
  SettleKind kind = SettleKind::ack;
  bool requeue = false;
};

}  // namespace nackguard::session
