#include "proxy/retry/decision.hpp"

#include <algorithm>
#include <limits>

#include "proxy/retry/backoff.hpp"

namespace nackguard::retry {
namespace {

constexpr std::uint32_t kMaxCount = std::numeric_limits<std::uint32_t>::max();

std::uint32_t saturating_add(std::uint32_t a, std::uint32_t b) {
  return a > kMaxCount - b ? kMaxCount : a + b;
}

Millis tiered_backoff(const Backoff& backoff, std::uint32_t returns, std::mt19937_64& rng) {
  const Millis delay = backoff_delay(backoff, std::max<std::uint32_t>(returns, 1), rng);
  return delay_tier(delay, backoff.jitter == Backoff::Jitter::none);
}

// A fixed window: it starts at the first return counted in it and lasts rate.window (steady
// clock milliseconds).
void count_in_window(const RateLimits& rate, TrackerEntry& entry, std::int64_t now_ms) {
  if (entry.window_returns == 0 || now_ms - entry.window_start_ms >= rate.window.count()) {
    entry.window_start_ms = now_ms;
    entry.window_returns = 0;
  }
  if (entry.window_returns < kMaxCount) ++entry.window_returns;
}

// An entry that is not this copy's cache starts afresh for it. The rate window stays: it
// measures how fast the message comes back, whichever copy it is.
void adopt(TrackerEntry& entry, const CarriedCount& carried) {
  if (entry_matches(entry, carried)) return;
  TrackerEntry fresh;
  fresh.window_returns = entry.window_returns;
  fresh.window_start_ms = entry.window_start_ms;
  fresh.first_return_ms = entry.first_return_ms;
  fresh.copy_id = carried.copy_id;
  entry = fresh;
}

}  // namespace

bool entry_matches(const TrackerEntry& entry, const CarriedCount& carried) {
  const bool recorded = entry.last_return_ms != 0 || entry.uncounted_redelivery;
  return recorded && entry.copy_id == carried.copy_id;
}

std::uint32_t implied_returns(const TrackerEntry* entry, const CarriedCount& carried) {
  if (!carried.redelivered || !carried.flag_counts) return 0;
  if (entry && entry_matches(*entry, carried) && entry->uncounted_redelivery) return 0;
  return 1;
}

std::uint32_t explicit_count(const TrackerEntry* entry, const CarriedCount& carried) {
  if (entry && entry_matches(*entry, carried)) return std::max(entry->returns, carried.nackguard);
  return carried.nackguard;
}

std::uint32_t count_base(const TrackerEntry* entry, const CarriedCount& carried) {
  return std::max(explicit_count(entry, carried),
                  saturating_add(carried.nackguard, implied_returns(entry, carried)));
}

std::uint32_t deliveries_before(const TrackerEntry* entry, const CarriedCount& carried) {
  if (entry && entry_matches(*entry, carried) && entry->deliveries != 0) {
    return std::max(entry->deliveries, carried.deliveries);
  }
  return saturating_add(carried.deliveries, std::max(carried.broker, carried.acquired));
}

bool first_return_needs_copy(const Policy& policy) {
  // decide_return with count_base 0: the count and the window's count both become 1.
  constexpr std::uint32_t kFirst = 1;
  if (kFirst > policy.max_redeliveries) {
    return policy.dead_letter.via == DeadLetter::Via::publish;
  }
  return policy.requeue == RequeueMode::delayed || kFirst > policy.rate.per_message;
}

std::string_view to_string(Action action) {
  switch (action) {
    case Action::forward:
      return "forward";
    case Action::delay:
      return "delay";
    case Action::dead_letter:
      return "dead_letter";
    case Action::republish:
      return "republish";
  }
  return "unknown";
}

std::string_view to_string(DeadLetterReason reason) {
  switch (reason) {
    case DeadLetterReason::none:
      return "none";
    case DeadLetterReason::max_redeliveries:
      return "max_redeliveries";
    case DeadLetterReason::crash_loop:
      return "crash_loop";
    case DeadLetterReason::broker_delivery_limit:
      return "broker_delivery_limit";
    case DeadLetterReason::consumer_timeout:
      return "consumer_timeout";
  }
  return "unknown";
}

Decision decide_return(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                       std::mt19937_64& rng) {
  // Every return ends one delivery, whether it counts towards the limit or not.
  const std::uint32_t before = deliveries_before(&entry, event.carried);
  const std::uint32_t base = count_base(&entry, event.carried);
  adopt(entry, event.carried);

  Decision decision;
  if (event.outage) {
    // A queue-wide failure is not the message's fault: hold it back without spending its
    // budget. Its redelivery, if it goes back to the broker, is no return either.
    entry.returns = base;
    entry.uncounted_redelivery = true;
    decision.action = Action::delay;
    decision.delay = tiered_backoff(policy.backoff, base, rng);
  } else {
    if (entry.first_return_ms == 0) entry.first_return_ms = event.wall_ms;
    entry.returns = saturating_add(base, 1);
    entry.uncounted_redelivery = false;
    count_in_window(policy.rate, entry, event.steady_ms);
    if (entry.returns > policy.max_redeliveries) {
      decision.action = Action::dead_letter;
      decision.reason = event.consumer_timeout ? DeadLetterReason::consumer_timeout
                        : event.crash          ? DeadLetterReason::crash_loop
                                               : DeadLetterReason::max_redeliveries;
    } else if (policy.requeue == RequeueMode::delayed ||
               entry.window_returns > policy.rate.per_message) {
      decision.action = Action::delay;
      decision.delay = tiered_backoff(policy.backoff, entry.returns, rng);
    }
  }
  decision.returns = entry.returns;
  entry.deliveries = saturating_add(before, 1);
  decision.deliveries = entry.deliveries;
  entry.last_return_ms = event.wall_ms;
  entry.crash_suspect = event.crash;
  // What an earlier crash left pending is spent: this return is decided now.
  clear_pending(entry);
  return decision;
}

}  // namespace nackguard::retry
