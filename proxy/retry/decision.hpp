#pragma once
// How a message's returns are counted, and what the policy makes of one more: pure functions of
// the policy, what the message carries and the tracker's entry. The final decision at each
// moment (a client's requeue, a crash, a delivery), with the broker's limit and whether a copy
// can be made, is in outcome.hpp; docs/choosing-a-policy.md, "How nackguard counts", is the
// model these implement.

#include <cstdint>
#include <optional>
#include <random>
#include <string_view>

#include "proxy/retry/action.hpp"
#include "proxy/retry/policy.hpp"
#include "proxy/retry/tracker.hpp"

namespace nackguard::retry {

struct Decision {
  Action action = Action::forward;
  Millis delay{0};  // for Action::delay: already rounded to a delay-queue tier
  DeadLetterReason reason = DeadLetterReason::none;
  std::uint32_t returns = 0;  // the count after this return, as carried in x-nackguard-returns
  // Deliveries to consumers so far, counted or not towards the limit (an outage's and a
  // crash's included), as carried in x-nackguard-deliveries (deliveries_before).
  std::uint32_t deliveries = 0;
  // The copy is of a crash suspect: it carries x-nackguard-suspect, so that whichever sidecar
  // delivers it hands it out alone.
  bool suspect = false;
};

// What one delivery of a message says of its count: the headers of nackguard's copies and the
// broker's flag and counters.
struct CarriedCount {
  // x-nackguard-returns, when it counts in the queue the message was delivered from
  // (x-nackguard-returns-queue names it; see carried_count in proxy/guard/identity.cpp): the
  // count when the copy was made. 0 on an original, and on a dead letter read from its DLQ.
  std::uint32_t nackguard = 0;
  std::uint32_t broker = 0;  // x-delivery-count: a quorum queue's count of returns
  // x-delivery-count is there, 0 included (RabbitMQ 3.x sets it, 0, on a quorum queue's
  // basic.get-ok; every version from a message's first redelivery on): only quorum queues do.
  bool from_quorum_queue = false;
  // x-nackguard-deliveries: the deliveries before this message was copied, on nackguard's
  // copies.
  std::uint32_t deliveries = 0;
  // x-nackguard-copy-id: which copy of nackguard's this is (0: not a copy). The tracker's entry
  // is a cache of the returns since one copy; another copy makes it stale (count_base).
  std::uint64_t copy_id = 0;
  // The broker's redelivered flag: the message went back to its queue since it was published
  // (or copied) without a copy recording it. nackguard writes a copy at every return it counts
  // except a first one, so the flag stands for exactly one return (implied_returns).
  bool redelivered = false;
  // Whether the flag stands for a return. Not on a copy marked x-nackguard-exact (made from a
  // quorum queue): a quorum queue also redelivers, and counts, a delivery its consumer never
  // got (one that crossed the consumer's basic.cancel, which RabbitMQ returns itself), so
  // nackguard writes every return of such a copy into a copy of its own, and the flag counts
  // nothing.
  bool flag_counts = true;
  // x-nackguard-suspect: the copy was made at a crash; hand it out alone.
  bool suspect = false;
  // A copy of nackguard's made for this queue (x-nackguard-returns counts here): a retry,
  // which the broker delivers as a new message.
  bool copy = false;
  // x-acquired-count (RabbitMQ 4.3 and later, quorum queues): the deliveries before this one,
  // whatever ended them (4.3's x-delivery-count leaves nacks out). Diagnostic only.
  std::uint32_t acquired = 0;
};

// Whether `entry` is a cache of this copy's returns: made since the delivery of the same copy
// (or of the original, copy_id 0). An entry nothing was recorded in is not.
bool entry_matches(const TrackerEntry& entry, const CarriedCount& carried);

// The returns the broker's redelivered flag stands for: 1 when the message was redelivered,
// unless a matching entry knows that the return behind the flag was not counted (the message
// was held back in the proxy, the broker connection was lost, an outage held its count).
std::uint32_t implied_returns(const TrackerEntry* entry, const CarriedCount& carried);

// The count a return or a delivery starts from: what the message carries (x-nackguard-returns
// plus implied_returns), or a matching entry's count if larger (returns a sidecar counted since
// the copy and could not write into one yet). The broker's x-delivery-count is never part of
// it: it also counts returns that were no fault of the message (every prefetched message at a
// consumer's crash, deliveries held in the proxy, a sidecar or a node that went away).
std::uint32_t count_base(const TrackerEntry* entry, const CarriedCount& carried);

// The part of count_base that the message carries or a matching entry recorded, without the
// one implied by the redelivered flag: a delivery is dead-lettered on this count only.
std::uint32_t explicit_count(const TrackerEntry* entry, const CarriedCount& carried);

// The deliveries a message had before the one now held: a matching entry's record, or the
// copy's x-nackguard-deliveries plus the broker's count of returns since the copy (diagnostic:
// x-nackguard-deliveries).
std::uint32_t deliveries_before(const TrackerEntry* entry, const CarriedCount& carried);

struct ReturnEvent {
  std::int64_t wall_ms = 0;    // for the first and last return times (header timestamps)
  std::int64_t steady_ms = 0;  // for the rate window: a wall clock's step must not move it
  CarriedCount carried;
  bool crash = false;  // the channel or connection ended with the message unacked
  // The crash's consumer held this message alone (on the channel, or the connection for a
  // connection's end): the crash is the message's doing. A crash with several deliveries in
  // the consumer's hands can dead-letter none of them (outcome.hpp).
  bool solo = false;
  // A crash return of the one delivery whose ack timed out (RabbitMQ's consumer_timeout or the
  // policy's ack_timeout): past the limit, reason consumer_timeout instead of crash_loop.
  bool consumer_timeout = false;
  bool outage = false;  // the queue is in outage (QueueHealth)
};

// Counts a return in `entry` (a stale or empty one starts afresh for this copy: see
// entry_matches) and decides by the policy alone:
//   - in outage: the count does not advance (it only takes count_base); delay.
//   - otherwise the count becomes count_base + 1, and the window count advances;
//     count > max_redeliveries: dead-letter (crash_loop or consumer_timeout for a crash);
//     requeue: delayed: delay; window returns > per_message: delay; else forward.
// A crash return marks the entry crash_suspect. outcome.hpp turns this into the final decision.
Decision decide_return(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                       std::mt19937_64& rng);

// Whether the first return of a message with no count anywhere (no tracker entry, no count
// header), counted outside an outage, asks for a copy of its body under `policy`: true when
// decide_return would dead-letter it by publishing (max_redeliveries 0, dead_letter.via
// publish) or delay it (requeue: delayed, or rate.per_message 0); false when it is forwarded,
// or dead-lettered with basic.reject. The guard keeps a first delivery's body only if this, or
// something the policy cannot tell (an outage, the broker's limit), may need it.
bool first_return_needs_copy(const Policy& policy);

// Returns the broker may count that the client never saw. A requeue that crosses the consumer's
// basic.cancel or its channel's close: the broker counts the requeue, hands the message to the
// same consumer again before the cancel takes effect, and counts one more return when the
// channel closes, for a delivery the client never got (seen on 4.0.5: a poison nacked at
// x-delivery-count 19 of 20, then its consumer closed, was gone; the integration test
// RedeliveryGuardTest.test_i_no_configure_permission_falls_back).
inline constexpr std::uint32_t kUnseenReturns = 1;

// Whether one more return of a message that carries x-delivery-count `broker_count` may take
// it past the broker's delivery limit (RabbitMQ drops or dead-letters a message whose count
// exceeds it): the return itself, plus kUnseenReturns.
constexpr bool next_return_passes(std::uint32_t broker_count,
                                  std::optional<std::uint32_t> broker_limit) {
  return broker_limit && std::uint64_t{broker_count} + 1 + kUnseenReturns > *broker_limit;
}

}  // namespace nackguard::retry
