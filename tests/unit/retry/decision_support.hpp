#pragma once
// What the decision tests (decision_test.cpp, outcome_test.cpp, count_model_test.cpp) share:
// their clock and the policy they start from.

#include <cstdint>

#include "proxy/retry/policy.hpp"

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

}  // namespace nackguard::retry::test
