#pragma once
// The final decision at each moment nackguard acts on a message: a consumer's requeue, a crash
// (its channel or connection ended with the message in its hands) and a delivery. Pure rules,
// from the whole situation: the policy, the tracker's entry (a cache), what the message
// carries, the broker's delivery limit as far as it is known, whether a copy can be made and
// whether copies for the queue are failing, and the outage state. The guard carries out what
// they return and changes none of it; docs/choosing-a-policy.md, "How nackguard counts", is the
// model they implement.

#include <cstdint>
#include <optional>
#include <random>
#include <string_view>

#include "proxy/retry/decision.hpp"
#include "proxy/retry/fallback.hpp"

namespace nackguard::retry {

// When a queue's delivery limit cannot be known (a RabbitMQ policy, an operator policy or a
// declaration nackguard never saw may set one, and no frame shows it), nackguard assumes this
// one: the lowest that leaves a message room for one return plus kUnseenReturns. So any
// delivery carrying x-delivery-count 1 or more is republished before the consumer sees it, and
// no limit of 2 or more drops a message.
inline constexpr std::uint32_t kAssumedBrokerLimit = 2;

// What the guard knows besides the message.
struct Circumstances {
  // The queue's delivery limit in force (nullopt: none), as retry::broker_delivery_limit
  // (queue_facts.hpp) gives it.
  std::optional<std::uint32_t> broker_limit;
  // The delivery's body is kept (a copy needs it), and a first delivery kept none by design.
  bool body_kept = true;
  bool body_skipped = false;
  bool proxy_channel = true;    // the broker's channel_max left the proxy a channel
  bool copies_failing = false;  // a copy for the queue failed moments ago (GuardContext)
  // At a crash: the session can keep the message from the broker while its copy is made (it
  // holds the channel's or connection's close). Not when the broker itself ended the channel.
  bool take_over_at_crash = true;
  bool reject_dead_letters = false;  // the policy's dead_letter.via is reject: no copy needed
  // The queue is known to be a quorum queue. Its redelivered flag may stand for a return no
  // consumer made (CarriedCount::flag_counts), and a sidecar that delivers a message next
  // knows nothing of a crash this one saw: every crash return is written into a copy marked
  // suspect (decide_crash), the first since a copy included.
  bool quorum_queue = false;
};

struct Outcome {
  // forward: at a requeue, the consumer's frame goes to the broker; at a crash, the broker's own
  // requeue stands; at a delivery, the consumer gets it. Anything else: the proxy takes the
  // message over and publishes the copy the decision names (or, for a dead-letter by reject,
  // rejects it), acking the original once the broker confirmed the copy.
  Decision decision;
  // A copy was wanted and cannot be made: the consumer's own frame goes to the broker instead
  // (at a crash, the broker's own requeue stands).
  FallbackCause fallback = FallbackCause::none;
  Action wanted = Action::forward;  // with a fallback: the copy it wanted
  // The copy (or the fallback) is about the broker's own delivery limit: one more return
  // forwarded could have the broker drop or dead-letter the message itself.
  bool at_broker_limit = false;
  bool suspect = false;  // at a delivery: hand it out alone (a crash suspect)
};

// A consumer's basic.nack or basic.reject with requeue=true. Counts the return in `entry`.
// Under the policy's limit, an immediate requeue is forwarded when the broker's redelivered flag
// can carry the count (the first return since the message's copy, nothing else counted), else
// republished with its count; past the limit it is dead-lettered.
Outcome decide_requeue(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                       const Circumstances& circumstances, std::mt19937_64& rng);

// A crash return: the channel or connection ended with the message in the consumer's hands
// (event.crash; event.solo when it was the only one; event.consumer_timeout for the delivery
// whose ack timed out). Counts it in `entry` and marks it a suspect. Only a solo crash or a
// timeout can dead-letter; a crash with several messages in hand cannot tell the culprit and
// keeps each at most at the limit. What the broker's requeue cannot carry (the count, a delay,
// a dead-letter) is taken over at the crash when possible, else left pending in `entry` for the
// message's next delivery through this proxy.
Outcome decide_crash(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                     const Circumstances& circumstances, std::mt19937_64& rng);

// A basic.recover: the consumer is alive and asks for everything again, and the broker
// requeues it all at once. Decided as decide_crash decides (what the broker's requeue cannot
// carry waits for the next delivery), but the message is no suspect: the consumer chose to
// give it back, so a dead-letter left pending is for max_redeliveries, not crash_loop.
Outcome decide_recover(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                       const Circumstances& circumstances, std::mt19937_64& rng);

// A return that was not the message's doing: it waited in the proxy behind a suspect, or the
// broker connection was lost. Nothing is counted; `entry` learns that the redelivered flag
// the broker will set stands for no return.
void note_uncounted_return(TrackerEntry& entry, const CarriedCount& carried);

// The same return, when the proxy can keep the message from the broker's requeue (its client
// closed or went away, and the broker side is still open): it is republished instead, with the
// count it carries, and marked a suspect if it was one. So the broker's redelivered flag, which
// any other sidecar would read as one return, is never set for it. forward: no copy can be made
// (note_uncounted_return then applies).
Outcome decide_uncounted_return(const TrackerEntry* entry, const CarriedCount& carried,
                                const Circumstances& circumstances);

// A delivery from the queue. `entry` (nullable) is the tracker's. Forwarded, and handed out
// alone when it is a suspect (a copy made at a crash carries x-nackguard-suspect, or a matching
// entry says so); or taken over: a decision a crash left pending, or a republish when one more
// return could pass the broker's limit. Never dead-lettered on a count alone: its next return
// decides.
Outcome decide_delivery(const Policy& policy, const TrackerEntry* entry,
                        const CarriedCount& carried, const Circumstances& circumstances);

}  // namespace nackguard::retry
