#pragma once
// The decision taken for each return of a message: a pure function of the policy, the
// tracker's entry and the queue's health.

#include <cstdint>
#include <random>
#include <string_view>

#include "proxy/retry/policy.hpp"
#include "proxy/retry/tracker.hpp"

namespace nackguard::retry {

enum class Action : std::uint8_t { forward = 0, delay = 1, dead_letter = 2 };
enum class DeadLetterReason : std::uint8_t { none = 0, max_redeliveries = 1, crash_loop = 2 };
std::string_view to_string(Action action);
std::string_view to_string(DeadLetterReason reason);

struct Decision {
  Action action = Action::forward;
  Millis delay{0};  // for Action::delay: already rounded to a delay-queue tier
  DeadLetterReason reason = DeadLetterReason::none;
  std::uint32_t returns = 0;  // the count after this return, as carried in x-nackguard-returns
};

struct ReturnEvent {
  std::int64_t now_ms = 0;
  std::uint32_t header_count = 0;  // max of x-nackguard-returns and x-delivery-count, 0 if none
  bool crash = false;              // the channel or connection ended with the message unacked
  bool outage = false;             // the queue is in outage (QueueHealth)
};

// Counts a return in `entry` and decides:
//   - in outage: the count does not advance (it only takes header_count if larger); delay.
//   - otherwise the count becomes max(count, header_count) + 1, and the window count advances;
//     count > max_redeliveries: dead-letter (crash_loop if this return was a crash);
//     requeue: delayed: delay; window returns > per_message: delay; else forward.
// A crash return's decision is also stored in the entry as pending (see decide_delivery),
// and the entry is marked crash_suspect.
Decision decide_return(const Policy& policy, TrackerEntry& entry, const ReturnEvent& event,
                       std::mt19937_64& rng);

// At a delivery of a message the tracker knows: the action a crash return left pending
// (delay or dead-letter), else dead-letter if its count is already over the limit
// (header_count included), else forward. Does not change the entry; the caller clears the
// pending action once carried out.
Decision decide_delivery(const Policy& policy, const TrackerEntry& entry,
                         std::uint32_t header_count);

}  // namespace nackguard::retry
