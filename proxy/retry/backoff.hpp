#pragma once
// Backoff delays and their rounding onto delay-queue tiers.

#include <cstdint>
#include <random>

#include "proxy/retry/policy.hpp"

namespace nackguard::retry {

// The delay before the `attempt`-th redelivery (attempt >= 1): initial * multiplier^(attempt-1),
// capped at max, then jittered: full = uniform in [0, d]; fraction f = uniform in
// [d(1-f), d(1+f)] capped at max; none = d. The result is at least 1 ms.
Millis backoff_delay(const Backoff& backoff, std::uint32_t attempt, std::mt19937_64& rng);

// Delay queues carry one TTL each, so delays are rounded onto a finite set of tiers: 1/8 of
// an octave apart (at most 4.5% away), exact powers of two times 1 s included. A delay is
// rounded to the nearest tier; `exact` delays (no jitter) are kept as they are, since an
// un-jittered policy yields only a few distinct values.
Millis delay_tier(Millis delay, bool exact);

}  // namespace nackguard::retry
