#pragma once
// What the decision tests (decision_test.cpp, outcome_test.cpp, count_model_test.cpp) share:
// their clock, the policy they start from, and the fixture of one message's decisions.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "proxy/retry/policy.hpp"
#include "proxy/retry/tracker.hpp"

namespace nackguard::retry::test {

inline constexpr std::int64_t kT0 = 1'700'000'000'000;
inline constexpr std::int64_t kApart = 60'000;  // further apart than the rate window

// Queue "orders": requeue immediate, the backoff without jitter (1 s doubling to 10 min), a
// 10 s rate window allowing `per_message` returns in it.
inline Policy immediate_policy(std::uint32_t max_redeliveries, std::uint32_t per_message = 3) {
  Policy policy;
  policy.queue = "orders";
  policy.max_redeliveries = max_redeliveries;
  policy.requeue = RequeueMode::immediate;
  policy.backoff = Backoff{Millis(1000), 2.0, Millis(600'000), Backoff::Jitter::none, 0.0};
  policy.rate.window = Millis(10'000);
  policy.rate.per_message = per_message;
  return policy;
}

// One message's decisions: its policy, immediate_policy(MaxRedeliveries, PerMessage), which a
// test may change before the first decision; its tracker entry; a generator seeded with 1.
template <std::uint32_t MaxRedeliveries, std::uint32_t PerMessage = 3>
class DecisionTest : public ::testing::Test {
 protected:
  Policy policy = immediate_policy(MaxRedeliveries, PerMessage);
  std::mt19937_64 rng{1};
  TrackerEntry entry;
};

}  // namespace nackguard::retry::test
