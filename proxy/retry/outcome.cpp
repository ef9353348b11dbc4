#include "proxy/retry/outcome.hpp"

#include <algorithm>
#include <limits>

namespace nackguard::retry {
namespace {

bool passes_limit(const CarriedCount& carried, const Circumstances& c) {
  return next_return_passes(carried.broker, c.broker_limit);
}

// The broker's redelivered flag carries exactly one return: the count is the copy's plus this
// one, the message was not redelivered since the copy (the flag is still free), and its flag
// counts (not an exact copy: CarriedCount::flag_counts).
bool flag_carries(const Decision& decision, const CarriedCount& carried) {
  return carried.flag_counts && !carried.redelivered &&
         carried.nackguard < std::numeric_limits<std::uint32_t>::max() &&
         decision.returns == carried.nackguard + 1;
}

bool needs_copy(const Decision& decision, const Circumstances& c) {
  if (decision.action == Action::forward) return false;
  return !(decision.action == Action::dead_letter && c.reject_dead_letters);
}

// Why the copy `decision` asks for cannot be made now, if it cannot. A republish into the
// queue itself needs no declaration, so copies failing for want of a DLQ or delay queue do not
// stop it.
FallbackCause copy_blocked(const Decision& decision, const Circumstances& c) {
  if (!c.body_kept)
    return c.body_skipped ? FallbackCause::body_skipped : FallbackCause::body_not_retained;
  if (!c.proxy_channel) return FallbackCause::no_channel;
  if (c.copies_failing && decision.action != Action::republish) {
    return FallbackCause::republish_failed;
  }
  return FallbackCause::none;
}

// What a decision at a delivery or an uncounted return starts from: the returns and deliveries
// counted before it, and whether the message is a crash suspect. `matching`: the entry is the
// message's since its last copy (entry_matches).
Decision counted_so_far(const TrackerEntry* entry, const CarriedCount& carried, bool matching) {
  Decision d;
  d.returns = count_base(entry, carried);
  d.deliveries = deliveries_before(entry, carried);
  d.suspect = carried.suspect || (matching && entry->crash_suspect);
  return d;
}

void forward_instead(Outcome& out, FallbackCause cause) {
  out.wanted = out.decision.action;
  out.decision.action = Action::forward;
  out.decision.reason = DeadLetterReason::none;
  out.decision.delay = Millis(0);
  out.fallback = cause;
}

}  // namespace

std::string_view to_string(FallbackCause cause) {
  switch (cause) {
    case FallbackCause::none:
      return "none";
    case FallbackCause::body_not_retained:
    case FallbackCause::body_skipped:
      return "body_not_retained";
    case FallbackCause::no_channel:
      return "no_channel";
    case FallbackCause::malformed_properties:
      return "malformed_properties";
    case FallbackCause::republish_failed:
      return "republish_failed";
    case FallbackCause::encode_failed:
      return "encode_failed";
  }
  return "unknown";
}

Outcome decide_requeue(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                       const Circumstances& c, std::mt19937_64& rng) {
  Outcome out;
  out.decision = decide_return(policy, entry, event, rng);
  Decision& d = out.decision;
  out.at_broker_limit = passes_limit(event.carried, c);
  if (d.action == Action::dead_letter && out.at_broker_limit &&
      d.reason == DeadLetterReason::max_redeliveries) {
    d.reason = DeadLetterReason::broker_delivery_limit;
  }
  // Forwarded, a requeue the flag cannot carry would lose its count; one that may pass the
  // broker's limit would have the broker drop or dead-letter the message.
  if (d.action == Action::forward && (out.at_broker_limit || !flag_carries(d, event.carried))) {
    d.action = Action::republish;
  }
  if (!needs_copy(d, c)) return out;
  FallbackCause blocked = copy_blocked(d, c);
  if (blocked == FallbackCause::republish_failed && out.at_broker_limit) {
    // Its DLQ or delay queue is refused: republishing it to its own queue needs neither, and
    // the consumer's requeue would have the broker end it.
    d.action = Action::republish;
    d.reason = DeadLetterReason::none;
    d.delay = Millis(0);
    blocked = FallbackCause::none;
  }
  if (blocked != FallbackCause::none) forward_instead(out, blocked);
  return out;
}

Outcome decide_crash(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                     const Circumstances& c, std::mt19937_64& rng) {
  Outcome out;
  out.decision = decide_return(policy, entry, event, rng);
  Decision& d = out.decision;
  d.suspect = true;
  const bool quorum =
      c.quorum_queue || event.carried.from_quorum_queue || !event.carried.flag_counts;
  if (!event.solo && !event.consumer_timeout && d.returns > policy.max_redeliveries) {
    // Several messages were in the consumer's hands: none is known to be the culprit. Each
    // stays at the limit, a suspect: handed out alone, its next return decides.
    d.action = Action::forward;
    d.reason = DeadLetterReason::none;
    d.returns = entry.returns = std::max(policy.max_redeliveries, event.carried.nackguard);
    // Requeued by the broker, its flag stands for one more: past the limit, which never
    // dead-letters at a delivery; its next return does, as it would from the limit.
    if (!event.carried.redelivered && !quorum) return out;
  }
  out.at_broker_limit = passes_limit(event.carried, c);
  if (d.action == Action::forward) {
    // The broker's requeue carries the count (its redelivered flag) when this is the first
    // return since the copy; otherwise, and on a quorum queue, a copy must.
    if (!quorum && flag_carries(d, event.carried)) return out;
    d.action = Action::republish;
  }
  if (!needs_copy(d, c)) return out;
  const FallbackCause blocked = copy_blocked(d, c);
  if (blocked == FallbackCause::none && c.take_over_at_crash) return out;
  // The broker requeues it. A delay or a dead-letter waits for its next delivery through this
  // proxy (decide_delivery); a count the flag cannot carry stays in the entry only.
  if (d.action == Action::delay || d.action == Action::dead_letter) {
    entry.pending_action = d.action;
    entry.pending_reason = d.reason;
    entry.pending_delay_ms = static_cast<std::uint32_t>(
        std::min<std::int64_t>(d.delay.count(), std::numeric_limits<std::uint32_t>::max()));
  }
  forward_instead(out, blocked);
  return out;
}

Outcome decide_recover(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                       const Circumstances& c, std::mt19937_64& rng) {
  Outcome out = decide_crash(policy, entry, event, c, rng);
  entry.crash_suspect = false;
  if (entry.pending_reason == DeadLetterReason::crash_loop) {
    entry.pending_reason = DeadLetterReason::max_redeliveries;
  }
  return out;
}

void note_uncounted_return(TrackerEntry& entry, const CarriedCount& carried) {
  if (!entry_matches(entry, carried)) {
    TrackerEntry fresh;
    fresh.copy_id = carried.copy_id;
    fresh.returns = carried.nackguard + implied_returns(nullptr, carried);
    entry = fresh;
  }
  entry.uncounted_redelivery = true;
}

Outcome decide_uncounted_return(const TrackerEntry* entry, const CarriedCount& carried,
                                const Circumstances& c) {
  Outcome out;
  const bool matching = entry && entry_matches(*entry, carried);
  out.decision = counted_so_far(entry, carried, matching);
  Decision& d = out.decision;
  d.action = Action::republish;
  // A decision a crash left pending is carried out now, as at its next delivery.
  if (matching &&
      (entry->pending_action == Action::delay || entry->pending_action == Action::dead_letter)) {
    d.action = entry->pending_action;
    d.reason = entry->pending_reason;
    d.delay = Millis(entry->pending_delay_ms);
  }
  if (!c.take_over_at_crash || !needs_copy(d, c) || copy_blocked(d, c) != FallbackCause::none) {
    forward_instead(out, FallbackCause::none);
  }
  return out;
}

Outcome decide_delivery(const Policy& policy, const TrackerEntry* entry,
                        const CarriedCount& carried, const Circumstances& c) {
  (void)policy;
  Outcome out;
  const bool matching = entry && entry_matches(*entry, carried);
  out.decision = counted_so_far(entry, carried, matching);
  Decision& d = out.decision;
  out.suspect = d.suspect;
  if (matching) {
    switch (entry->pending_action) {
      case Action::delay:
        d.action = Action::delay;
        d.delay = Millis(entry->pending_delay_ms);
        break;
      case Action::dead_letter:
        d.action = Action::dead_letter;
        d.reason = entry->pending_reason;
        break;
      case Action::republish:
      case Action::forward:
        break;
    }
  }
  // Its copy cannot be published now: hand it to the consumer, as without the proxy.
  if (needs_copy(d, c) && (copy_blocked(d, c) != FallbackCause::none)) {
    forward_instead(out, FallbackCause::none);
  }
  out.at_broker_limit = carried.broker != 0 && passes_limit(carried, c) && c.proxy_channel;
  if (out.at_broker_limit && d.action == Action::forward) d.action = Action::republish;
  return out;
}

}  // namespace nackguard::retry
