// first_return_needs_copy against what decide_return does with a first return: the guard keeps
// no body for a first delivery when it says false, so the two must never disagree.

#include <gtest/gtest.h>

#include "proxy/retry/decision.hpp"

namespace nackguard::retry {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000'000;

// What decide_return takes at the first return of a message nothing counted yet.
Decision first_return(const Policy& policy) {
  TrackerEntry entry;
  std::mt19937_64 rng(7);
  return decide_return(policy, entry, ReturnEvent{.wall_ms = kT0, .steady_ms = kT0, .carried = {}},
                       rng);
}

bool copies(const Policy& policy, const Decision& decision) {
  return decision.action != Action::forward && !(decision.action == Action::dead_letter &&
                                                 policy.dead_letter.via == DeadLetter::Via::reject);
}

TEST(FirstReturnNeedsCopy, AgreesWithDecideReturnOverEveryPolicyShape) {
  int needing = 0;
  int cases = 0;
  for (std::uint32_t max : {0u, 1u, 2u, 10u}) {
    for (RequeueMode requeue : {RequeueMode::immediate, RequeueMode::delayed}) {
      for (std::uint32_t per_message : {0u, 1u, 3u}) {
        for (DeadLetter::Via via : {DeadLetter::Via::publish, DeadLetter::Via::reject}) {
          Policy p;
          p.max_redeliveries = max;
          p.requeue = requeue;
          p.rate.per_message = per_message;
          p.dead_letter.via = via;
          const Decision decision = first_return(p);
          EXPECT_EQ(first_return_needs_copy(p), copies(p, decision))
              << "max " << max << " " << to_string(requeue) << " per_message " << per_message << " "
              << to_string(via) << ": " << to_string(decision.action);
          needing += first_return_needs_copy(p) ? 1 : 0;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 48);
  // Forwarded only with max >= 1, immediate, per_message >= 1 (3 * 2 * 2 = 12 cases), and
  // dead-lettered by reject at max 0 (2 * 3 = 6 cases).
  EXPECT_EQ(needing, 48 - 12 - 6);
}

TEST(FirstReturnNeedsCopy, TheDefaultPolicyForwardsIt) {
  EXPECT_FALSE(first_return_needs_copy(Policy{}));
}

}  // namespace
}  // namespace nackguard::retry
