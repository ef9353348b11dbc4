#include "proxy/retry/decision.hpp"

#include <gtest/gtest.h>

#include <limits>

#include "proxy/retry/backoff.hpp"
#include "retry/decision_support.hpp"

namespace nackguard::retry {
namespace {

using test::kApart;
using test::kT0;

// `carried`: the message's x-nackguard-returns.
ReturnEvent nack_at(std::int64_t now_ms, std::uint32_t carried = 0) {
  return ReturnEvent{.wall_ms = now_ms, .steady_ms = now_ms, .carried = {carried, 0}};
}

// `delivery_count`: the message's x-delivery-count (a quorum queue's count).
ReturnEvent quorum_nack_at(std::int64_t now_ms, std::uint32_t delivery_count) {
  return ReturnEvent{.wall_ms = now_ms, .steady_ms = now_ms, .carried = {0, delivery_count}};
}

ReturnEvent crash_at(std::int64_t now_ms) {
  return ReturnEvent{.wall_ms = now_ms, .steady_ms = now_ms, .carried = {}, .crash = true};
}

ReturnEvent outage_at(std::int64_t now_ms, std::uint32_t carried = 0) {
  return ReturnEvent{
      .wall_ms = now_ms, .steady_ms = now_ms, .carried = {carried, 0}, .outage = true};
}

// A fresh message's decisions under immediate_policy(5): five redeliveries.
class DecideReturn : public test::DecisionTest<5> {};

TEST_F(DecideReturn, ForwardsUpToMaxThenDeadLetters) {
  for (std::uint32_t n = 1; n <= 5; ++n) {
    const std::int64_t now = kT0 + n * kApart;
    const Decision decision = decide_return(policy, entry, nack_at(now), rng);
    EXPECT_EQ(decision.action, Action::forward) << "return " << n;
    EXPECT_EQ(decision.delay, Millis(0));
    EXPECT_EQ(decision.reason, DeadLetterReason::none);
    EXPECT_EQ(decision.returns, n);
    EXPECT_EQ(entry.returns, n);
    EXPECT_EQ(entry.first_return_ms, kT0 + kApart);
    EXPECT_EQ(entry.last_return_ms, now);
    EXPECT_EQ(entry.window_start_ms, now);  // each return opens a new window
    EXPECT_EQ(entry.window_returns, 1u);
  }
  const Decision sixth = decide_return(policy, entry, nack_at(kT0 + 6 * kApart), rng);
  EXPECT_EQ(sixth.action, Action::dead_letter);
  EXPECT_EQ(sixth.reason, DeadLetterReason::max_redeliveries);
  EXPECT_EQ(sixth.returns, 6u);
  EXPECT_FALSE(entry.crash_suspect);
  EXPECT_EQ(entry.pending_action, Action::forward);
}

TEST_F(DecideReturn, CrashReturnsSetSuspect) {
  const Decision first = decide_return(policy, entry, crash_at(kT0), rng);
  EXPECT_EQ(first.action, Action::forward);
  EXPECT_TRUE(entry.crash_suspect);
  // What the broker's requeue cannot carry is left pending by decide_crash (outcome.hpp), not
  // here.
  EXPECT_EQ(entry.pending_action, Action::forward);

  // A nack (the message was delivered and given back normally) clears the suspicion.
  decide_return(policy, entry, nack_at(kT0 + kApart), rng);
  EXPECT_FALSE(entry.crash_suspect);

  for (std::uint32_t n = 3; n <= 5; ++n) {
    decide_return(policy, entry, crash_at(kT0 + n * kApart), rng);
  }
  const Decision sixth = decide_return(policy, entry, crash_at(kT0 + 6 * kApart), rng);
  EXPECT_EQ(sixth.action, Action::dead_letter);
  EXPECT_EQ(sixth.reason, DeadLetterReason::crash_loop);
  EXPECT_EQ(sixth.returns, 6u);
  EXPECT_TRUE(entry.crash_suspect);
}

TEST_F(DecideReturn, ADecisionClearsWhatAnEarlierCrashLeftPending) {
  decide_return(policy, entry, crash_at(kT0), rng);
  entry.pending_action = Action::delay;
  entry.pending_delay_ms = 2000;
  decide_return(policy, entry, nack_at(kT0 + kApart), rng);
  EXPECT_EQ(entry.pending_action, Action::forward);
  EXPECT_EQ(entry.pending_delay_ms, 0u);
}

TEST_F(DecideReturn, DelayedRequeueUsesExponentialBackoff) {
  policy.max_redeliveries = 20;
  policy.requeue = RequeueMode::delayed;
  const std::int64_t expected_seconds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600};
  for (std::uint32_t n = 1; n <= 12; ++n) {
    const Decision decision = decide_return(policy, entry, nack_at(kT0 + n * kApart), rng);
    EXPECT_EQ(decision.action, Action::delay) << "return " << n;
    // Without jitter the delay is exact: 600 s is not rounded to the 608.874 s tier.
    EXPECT_EQ(decision.delay, Millis(expected_seconds[n - 1] * 1000)) << "return " << n;
  }
}

TEST_F(DecideReturn, JitteredDelaysAreRoundedToTiers) {
  policy.max_redeliveries = 20;
  policy.requeue = RequeueMode::delayed;
  policy.backoff.jitter = Backoff::Jitter::full;
  rng.seed(99);
  std::mt19937_64 replay(99);
  for (std::uint32_t n = 1; n <= 12; ++n) {
    const Decision decision = decide_return(policy, entry, nack_at(kT0 + n * kApart), rng);
    const Millis expected = delay_tier(backoff_delay(policy.backoff, n, replay), false);
    EXPECT_EQ(decision.action, Action::delay);
    EXPECT_EQ(decision.delay, expected) << "return " << n;
    EXPECT_EQ(delay_tier(decision.delay, false), decision.delay);  // a tier
  }
}

TEST_F(DecideReturn, TooManyReturnsInTheWindowAreDelayed) {
  for (std::uint32_t n = 1; n <= 3; ++n) {
    EXPECT_EQ(decide_return(policy, entry, nack_at(kT0 + n), rng).action, Action::forward);
  }
  const Decision fourth = decide_return(policy, entry, nack_at(kT0 + 4), rng);
  EXPECT_EQ(fourth.action, Action::delay);
  EXPECT_EQ(fourth.delay, Millis(8000));  // attempt 4
  EXPECT_EQ(entry.window_start_ms, kT0 + 1);
  EXPECT_EQ(entry.window_returns, 4u);

  // The window is fixed: it started at kT0 + 1 and ends 10 s later.
  const Decision fifth = decide_return(policy, entry, nack_at(kT0 + 1 + 10'000), rng);
  EXPECT_EQ(fifth.action, Action::forward);
  EXPECT_EQ(entry.window_start_ms, kT0 + 1 + 10'000);
  EXPECT_EQ(entry.window_returns, 1u);
  EXPECT_EQ(entry.returns, 5u);
}

TEST_F(DecideReturn, OutageDelaysWithoutSpendingTheBudget) {
  decide_return(policy, entry, nack_at(kT0), rng);
  decide_return(policy, entry, nack_at(kT0 + kApart), rng);
  ASSERT_EQ(entry.returns, 2u);
  const std::uint32_t window_returns = entry.window_returns;
  const std::int64_t window_start = entry.window_start_ms;

  for (int i = 0; i < 100; ++i) {
    const std::int64_t now = kT0 + 2 * kApart + i;
    const Decision decision = decide_return(policy, entry, outage_at(now), rng);
    ASSERT_EQ(decision.action, Action::delay) << i;
    ASSERT_EQ(decision.delay, Millis(2000)) << i;  // attempt = the unchanged count
    ASSERT_EQ(decision.returns, 2u) << i;
    ASSERT_EQ(entry.returns, 2u) << i;
    ASSERT_EQ(entry.last_return_ms, now);
  }
  EXPECT_EQ(entry.window_returns, window_returns);
  EXPECT_EQ(entry.window_start_ms, window_start);
  EXPECT_EQ(entry.first_return_ms, kT0);

  // After the outage the count goes on from where it was.
  const Decision after = decide_return(policy, entry, nack_at(kT0 + 3 * kApart), rng);
  EXPECT_EQ(after.action, Action::forward);
  EXPECT_EQ(after.returns, 3u);
}

TEST_F(DecideReturn, OutageTakesALargerHeaderCountButNeverDeadLetters) {
  const Decision first = decide_return(policy, entry, outage_at(kT0), rng);
  EXPECT_EQ(first.action, Action::delay);
  EXPECT_EQ(first.delay, Millis(1000));  // attempt at least 1
  EXPECT_EQ(first.returns, 0u);
  EXPECT_EQ(entry.first_return_ms, 0);  // not counted

  const Decision with_header = decide_return(policy, entry, outage_at(kT0 + 1, 9), rng);
  EXPECT_EQ(with_header.action, Action::delay);  // 9 > 5, but the queue is failing, not it
  EXPECT_EQ(with_header.returns, 9u);
  EXPECT_EQ(entry.returns, 9u);
}

TEST_F(DecideReturn, LargerHeaderCountIsTaken) {
  const Decision decision = decide_return(policy, entry, nack_at(kT0, 7), rng);
  EXPECT_EQ(decision.action, Action::dead_letter);
  EXPECT_EQ(decision.reason, DeadLetterReason::max_redeliveries);
  EXPECT_EQ(decision.returns, 8u);

  // A record of this copy's returns (last_return_ms set) counts on from the larger of the two.
  TrackerEntry ahead;
  ahead.returns = 3;
  ahead.last_return_ms = kT0;
  EXPECT_EQ(decide_return(policy, ahead, nack_at(kT0, 1), rng).returns, 4u);  // smaller: ignored
  TrackerEntry behind;
  behind.returns = 1;
  behind.last_return_ms = kT0;
  EXPECT_EQ(decide_return(policy, behind, nack_at(kT0, 4), rng).returns, 5u);
}

TEST(CountBase, TheMessageCarriesItsCount) {
  // x-nackguard-returns, nackguard's count on its copies; the redelivered flag stands for one
  // return since the copy that no copy recorded.
  EXPECT_EQ(count_base(nullptr, {.nackguard = 4}), 4u);
  EXPECT_EQ(count_base(nullptr, {.nackguard = 4, .redelivered = true}), 5u);
  EXPECT_EQ(count_base(nullptr, {.redelivered = true}), 1u);
  EXPECT_EQ(count_base(nullptr, {}), 0u);
  EXPECT_EQ(explicit_count(nullptr, {.nackguard = 4, .redelivered = true}), 4u);
}

TEST(CountBase, TheBrokersCountIsNeverPartOfIt) {
  // x-delivery-count counts every prefetched message at a crash and deliveries held in the
  // proxy: with a record or without, it adds nothing.
  TrackerEntry entry;
  entry.returns = 2;
  entry.last_return_ms = kT0;
  EXPECT_EQ(count_base(&entry, {.broker = 7, .redelivered = true}), 2u);
  EXPECT_EQ(count_base(nullptr, {.broker = 7, .redelivered = true}), 1u);
  EXPECT_EQ(count_base(nullptr, {.nackguard = 9, .broker = 40}), 9u);
}

TEST(CountBase, AMatchingEntryIsACacheOfReturnsTheMessageCannotCarry) {
  TrackerEntry entry;
  entry.returns = 3;  // this sidecar counted a crash the flag could not carry
  entry.last_return_ms = kT0;
  entry.copy_id = 77;
  EXPECT_EQ(count_base(&entry, {.nackguard = 1, .copy_id = 77, .redelivered = true}), 3u);
  // Another copy (another sidecar copied it since, or it was dead-lettered and replayed):
  // the entry is stale and the message's own count stands.
  EXPECT_EQ(count_base(&entry, {.nackguard = 1, .copy_id = 78, .redelivered = true}), 2u);
  EXPECT_EQ(count_base(&entry, {.nackguard = 0, .copy_id = 0}), 0u);
  // An entry nothing was recorded in matches nothing.
  TrackerEntry empty;
  EXPECT_FALSE(entry_matches(empty, {}));
}

TEST(CountBase, AnUncountedRedeliveryStandsForNoReturn) {
  // Held back in the proxy when its consumer crashed, or the broker connection was lost: the
  // redelivered flag the broker sets is no return of the message's.
  TrackerEntry entry;
  entry.returns = 2;
  entry.uncounted_redelivery = true;
  const CarriedCount carried{.nackguard = 2, .redelivered = true};
  EXPECT_EQ(implied_returns(&entry, carried), 0u);
  EXPECT_EQ(count_base(&entry, carried), 2u);
  // Without the entry (another sidecar, a restart) the flag counts one: never more.
  EXPECT_EQ(count_base(nullptr, carried), 3u);
}

TEST_F(DecideReturn, BrokerCountIgnoredOnceTheMessageHasARecord) {
  // A quorum queue counted every crash return of every prefetched message: an innocent message
  // that nackguard saw returned once carries x-delivery-count 4. It is not dead-lettered.
  EXPECT_EQ(decide_return(policy, entry, crash_at(kT0), rng).returns, 1u);
  const Decision second = decide_return(policy, entry, quorum_nack_at(kT0 + kApart, 9), rng);
  EXPECT_EQ(second.action, Action::forward);
  EXPECT_EQ(second.returns, 2u);
}

TEST_F(DecideReturn, BrokerCountNotTakenWithoutARecordEither) {
  // Issue 37, defect 1: a message held back behind a crash suspect carries the broker's count of
  // every crash that returned it; nackguard had no record of it and took that count.
  ReturnEvent event = quorum_nack_at(kT0, 5);
  event.carried.redelivered = true;
  const Decision decision = decide_return(policy, entry, event, rng);
  EXPECT_EQ(decision.action, Action::forward);
  EXPECT_EQ(decision.returns, 2u);  // the flag's one, and this one
  TrackerEntry in_outage;
  EXPECT_EQ(
      decide_return(
          policy, in_outage,
          ReturnEvent{.wall_ms = kT0, .steady_ms = kT0, .carried = {0, 3}, .outage = true}, rng)
          .returns,
      0u);
}

// x-nackguard-deliveries: every return ends a delivery, counted towards the limit or not.
TEST_F(DecideReturn, DeliveriesCountEveryReturnOutagesAndCrashesIncluded) {
  EXPECT_EQ(decide_return(policy, entry, nack_at(kT0), rng).deliveries, 1u);
  const Decision in_outage = decide_return(policy, entry, outage_at(kT0 + kApart), rng);
  EXPECT_EQ(in_outage.returns, 1u);     // not counted towards the limit ...
  EXPECT_EQ(in_outage.deliveries, 2u);  // ... but delivered all the same
  EXPECT_EQ(decide_return(policy, entry, crash_at(kT0 + 2 * kApart), rng).deliveries, 3u);
  EXPECT_EQ(entry.deliveries, 3u);
  // At its next delivery, the count is that of the deliveries before it.
  EXPECT_EQ(deliveries_before(&entry, {}), 3u);
}

TEST_F(DecideReturn, DeliveriesWithoutARecordComeFromTheHeaders) {
  // A copy delivered 4 times before it was copied, and returned twice since by a quorum queue.
  CarriedCount carried{.nackguard = 4, .broker = 2, .from_quorum_queue = true, .deliveries = 4};
  TrackerEntry known{.returns = 9, .last_return_ms = kT0, .deliveries = 12};
  ReturnEvent event{.wall_ms = kT0, .steady_ms = kT0, .carried = carried};
  EXPECT_EQ(decide_return(policy, entry, event, rng).deliveries, 4u + 2u + 1u);
  // A record of more wins over the headers.
  EXPECT_EQ(decide_return(policy, known, event, rng).deliveries, 13u);
  carried.deliveries = std::numeric_limits<std::uint32_t>::max();  // saturates, never wraps
  EXPECT_EQ(deliveries_before(nullptr, carried), std::numeric_limits<std::uint32_t>::max());
}

TEST(BrokerLimit, NextReturnPasses) {
  EXPECT_FALSE(next_return_passes(18, 20u));
  // Count 20 after the client's return, and 21 > 20 after one the client never saw (a requeue
  // that crossed the consumer's cancel: kUnseenReturns).
  EXPECT_TRUE(next_return_passes(19, 20u));
  EXPECT_TRUE(next_return_passes(20, 20u));  // the 21st return: count 21 > 20
  EXPECT_TRUE(next_return_passes(0, 0u));
  EXPECT_TRUE(next_return_passes(0, 1u));
  EXPECT_FALSE(next_return_passes(0, 2u));
  EXPECT_TRUE(next_return_passes(std::numeric_limits<std::uint32_t>::max(), 20u));  // no wrap
  EXPECT_FALSE(next_return_passes(1000, std::nullopt));
}

TEST(DecisionStrings, Names) {
  EXPECT_EQ(to_string(Action::republish), "republish");
  EXPECT_EQ(to_string(DeadLetterReason::broker_delivery_limit), "broker_delivery_limit");
  EXPECT_EQ(to_string(Action::forward), "forward");
  EXPECT_EQ(to_string(Action::delay), "delay");
  EXPECT_EQ(to_string(Action::dead_letter), "dead_letter");
  EXPECT_EQ(to_string(DeadLetterReason::none), "none");
  EXPECT_EQ(to_string(DeadLetterReason::max_redeliveries), "max_redeliveries");
  EXPECT_EQ(to_string(DeadLetterReason::crash_loop), "crash_loop");
}

}  // namespace
}  // namespace nackguard::retry
