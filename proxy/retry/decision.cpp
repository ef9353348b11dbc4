#include "proxy/retry/decision.hpp"

#include <algorithm>
#include <limits>

#include "proxy/retry/backoff.hpp"

namespace nackguard::retry {
namespace {

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
  if (entry.window_returns < std::numeric_limits<std::uint32_t>::max()) ++entry.window_returns;
}

Decision decide_counted(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                        std::mt19937_64& rng) {
  // Wall-clock milliseconds are never 0, so 0 means no return has been counted yet (a return
  // in outage is not counted, though it may have taken the count from the header).
  const bool own_record = entry.returns != 0 || entry.last_return_ms != 0;
  if (entry.first_return_ms == 0) entry.first_return_ms = event.wall_ms;
  const std::uint32_t base = count_base(own_record ? &entry : nullptr, event.carried);
  entry.returns = base == std::numeric_limits<std::uint32_t>::max() ? base : base + 1;
  count_in_window(policy.rate, entry, event.steady_ms);

  Decision decision;
  decision.returns = entry.returns;
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
  return decision;
}

// A queue-wide failure is not the message's fault: hold it back without spending its budget.
Decision decide_in_outage(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                          std::mt19937_64& rng) {
  const bool own_record = entry.returns != 0 || entry.last_return_ms != 0;
  entry.returns = count_base(own_record ? &entry : nullptr, event.carried);
  Decision decision;
  decision.action = Action::delay;
  decision.returns = entry.returns;
  decision.delay = tiered_backoff(policy.backoff, entry.returns, rng);
  return decision;
}

}  // namespace

std::uint32_t deliveries_before(const TrackerEntry* entry, CarriedCount carried) {
  if (entry != nullptr && entry->deliveries != 0)
    return std::max(entry->deliveries, carried.deliveries);
  const std::uint64_t total = std::uint64_t{carried.deliveries} + carried.broker;
  return static_cast<std::uint32_t>(
      std::min<std::uint64_t>(total, std::numeric_limits<std::uint32_t>::max()));
}

std::uint32_t count_base(const TrackerEntry* entry, CarriedCount carried) {
  if (entry != nullptr) return std::max(entry->returns, carried.nackguard);
  return std::max(carried.nackguard, carried.broker);
}

bool first_return_needs_copy(const Policy& policy) {
  // decide_counted with count_base 0: the count and the window's count both become 1.
  constexpr std::uint32_t kFirst = 1;
  if (kFirst > policy.max_redeliveries) {
    return policy.dead_letter.via == DeadLetter::Via::publish;
  }
  return policy.requeue == RequeueMode::delayed || kFirst > policy.rate.per_message;
}

Decision keep_from_broker_limit(Decision decision) {
  switch (decision.action) {
    case Action::forward:
      decision.action = Action::republish;
      break;
    case Action::dead_letter:
      if (decision.reason == DeadLetterReason::max_redeliveries) {
        decision.reason = DeadLetterReason::broker_delivery_limit;
      }
      break;
    case Action::delay:
    case Action::republish:
      break;
  }
  return decision;
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
  Decision decision = event.outage ? decide_in_outage(policy, entry, event, rng)
                                   : decide_counted(policy, entry, event, rng);
  entry.deliveries = before < std::numeric_limits<std::uint32_t>::max() ? before + 1 : before;
  decision.deliveries = entry.deliveries;
  entry.last_return_ms = event.wall_ms;
  entry.crash_suspect = event.crash;
  if (event.crash) {
    entry.pending_action = static_cast<std::uint8_t>(decision.action);
    entry.pending_reason = static_cast<std::uint8_t>(decision.reason);
    entry.pending_delay_ms = static_cast<std::uint32_t>(
        std::min<std::int64_t>(decision.delay.count(), std::numeric_limits<std::uint32_t>::max()));
  } else {
    // The message was delivered since any earlier crash, so what that crash left pending is
    // spent; this return's decision is carried out now by the caller.
    entry.pending_action = 0;
    entry.pending_reason = 0;
    entry.pending_delay_ms = 0;
  }
  return decision;
}

Decision decide_delivery(const Policy& policy, const TrackerEntry& entry, CarriedCount carried) {
  Decision decision;
  decision.returns = count_base(&entry, carried);
  decision.deliveries = deliveries_before(&entry, carried);
  switch (static_cast<Action>(entry.pending_action)) {
    case Action::delay:
      decision.action = Action::delay;
      decision.delay = Millis(entry.pending_delay_ms);
      return decision;
    case Action::dead_letter:
      decision.action = Action::dead_letter;
      decision.reason = static_cast<DeadLetterReason>(entry.pending_reason);
      return decision;
    case Action::republish:
    case Action::forward:
      break;
  }
  if (decision.returns > policy.max_redeliveries) {
    decision.action = Action::dead_letter;
    decision.reason = DeadLetterReason::max_redeliveries;
  }
  return decision;
}

}  // namespace nackguard::retry
