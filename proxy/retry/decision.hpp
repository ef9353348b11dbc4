#pragma once
// The decision taken for each return of a message: a pure function of the policy, the
// tracker's entry and the queue's health.

#include <cstdint>
#include <optional>
#include <random>
#include <string_view>

#include "proxy/retry/policy.hpp"
#include "proxy/retry/tracker.hpp"

namespace nackguard::retry {

// republish: a copy goes to the tail of the message's own queue at once and the original is
// acked, so the broker's count (x-delivery-count) starts again; the copy carries nackguard's.
enum class Action : std::uint8_t { forward = 0, delay = 1, dead_letter = 2, republish = 3 };
// broker_delivery_limit: the return that passed the policy's limit would also have passed the
// broker's own delivery limit.
enum class DeadLetterReason : std::uint8_t {
  none = 0,
  max_redeliveries = 1,
  crash_loop = 2,
  broker_delivery_limit = 3,
  // The return past the limit was the consumer holding it unacked until RabbitMQ's
  // consumer_timeout closed its channel.
  consumer_timeout = 4,
};
std::string_view to_string(Action action);
std::string_view to_string(DeadLetterReason reason);

struct Decision {
  Action action = Action::forward;
  Millis delay{0};  // for Action::delay: already rounded to a delay-queue tier
  DeadLetterReason reason = DeadLetterReason::none;
  std::uint32_t returns = 0;  // the count after this return, as carried in x-nackguard-returns
  // Deliveries to consumers so far, counted or not towards the limit (an outage's and a
  // crash's included), as carried in x-nackguard-deliveries (deliveries_before).
  std::uint32_t deliveries = 0;
};

// The counts a message carries in its headers.
struct CarriedCount {
  std::uint32_t nackguard = 0;  // x-nackguard-returns: nackguard's count, on its copies
  std::uint32_t broker = 0;     // x-delivery-count: a quorum queue's count of returns
  // x-delivery-count is there, 0 included (RabbitMQ 3.x sets it, 0, on a quorum queue's
  // basic.get-ok; every version from a message's first redelivery on): only quorum queues do.
  bool from_quorum_queue = false;
  // x-nackguard-deliveries: the deliveries before this message was copied, on nackguard's
  // copies.
  std::uint32_t deliveries = 0;
};

// The deliveries a message had before the one now held. nackguard's own record wins when it
// has one (as in count_base: the broker's x-delivery-count also counts deliveries held in the
// proxy that no consumer saw, and every prefetched message at a crash); only a copy's
// x-nackguard-deliveries can add to it. Without a record: the copy's x-nackguard-deliveries
// plus the broker's count of the returns since the copy was published.
std::uint32_t deliveries_before(const TrackerEntry* entry, CarriedCount carried);

// The count a return or a delivery starts from. nackguard's own record wins when it has one:
// the broker's x-delivery-count also counts returns that were no fault of the message (every
// prefetched message at a consumer's crash, deliveries held back behind a crash suspect), which
// is exactly what crash attribution corrects. Only x-nackguard-returns, nackguard's own count
// carried on its copies, can add to the record. Without a record (another replica counted, the
// proxy restarted, the entry was evicted) the larger of the two headers is the count.
std::uint32_t count_base(const TrackerEntry* entry, CarriedCount carried);

struct ReturnEvent {
  std::int64_t wall_ms = 0;    // for the first and last return times (header timestamps)
  std::int64_t steady_ms = 0;  // for the rate window: a wall clock's step must not move it
  CarriedCount carried;
  bool crash = false;  // the channel or connection ended with the message unacked
  // A crash return of the one delivery whose ack timed out (RabbitMQ's consumer_timeout):
  // past the limit, reason consumer_timeout instead of crash_loop.
  bool consumer_timeout = false;
  bool outage = false;  // the queue is in outage (QueueHealth)
};

// Counts a return in `entry` (zeroed if the tracker had none: a zeroed entry is no record of
// nackguard's own, see count_base) and decides:
//   - in outage: the count does not advance (it only takes count_base if larger); delay.
//   - otherwise the count becomes count_base + 1, and the window count advances;
//     count > max_redeliveries: dead-letter (crash_loop if this return was a crash);
//     requeue: delayed: delay; window returns > per_message: delay; else forward.
// A crash return's decision is also stored in the entry as pending (see decide_delivery),
// and the entry is marked crash_suspect.
Decision decide_return(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                       std::mt19937_64& rng);

// Whether the first return of a message with no count anywhere (no tracker entry, no count
// header), counted outside an outage, asks for a copy of its body under `policy`: true when
// decide_return would dead-letter it by publishing (max_redeliveries 0, dead_letter.via
// publish) or delay it (requeue: delayed, or rate.per_message 0); false when it is forwarded,
// or dead-lettered with basic.reject. The guard keeps a first delivery's body only if this, or
// something the policy cannot tell (an outage, the broker's limit), may need it.
bool first_return_needs_copy(const Policy& policy);

// At a delivery of a message the tracker knows: the action a crash return left pending
// (delay or dead-letter), else dead-letter if its count is already over the limit
// (count_base), else forward. Does not change the entry; the caller clears the pending action
// once carried out.
Decision decide_delivery(const Policy& policy, const TrackerEntry& entry, CarriedCount carried);

// Returns the broker may count that the client never saw. A requeue that crosses the consumer's
// basic.cancel or its channel's close: the broker counts the requeue, hands the message to the
// same consumer again before the cancel takes effect, and counts one more return when the
// channel closes, for a delivery the client never got (seen on 4.0.5, test_redelivery's
// test_i: a poison nacked at x-delivery-count 19 of 20, then the consumer closed; gone).
inline constexpr std::uint32_t kUnseenReturns = 1;

// Whether one more return of a message that carries x-delivery-count `broker_count` may take
// it past the broker's delivery limit (RabbitMQ drops or dead-letters a message whose count
// exceeds it): the return itself, plus kUnseenReturns.
constexpr bool next_return_passes(std::uint32_t broker_count,
                                  std::optional<std::uint32_t> broker_limit) {
  return broker_limit && std::uint64_t{broker_count} + 1 + kUnseenReturns > *broker_limit;
}

// A decision for a return or delivery after which the broker's own limit would end the message:
// it must not be forwarded. A forward becomes a republish, a dead-letter is marked
// broker_delivery_limit; a delay's copy starts a fresh broker count anyway.
Decision keep_from_broker_limit(Decision decision);

}  // namespace nackguard::retry
