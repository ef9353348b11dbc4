// The final decisions (outcome.hpp), case by case: the counting model of
// docs/choosing-a-policy.md, "How nackguard counts". Whole runs of a message through several
// sidecars are in count_model_test.cpp.

#include "proxy/retry/outcome.hpp"

#include <gtest/gtest.h>

#include "retry/decision_support.hpp"

namespace nackguard::retry {
namespace {

using test::kT0;

ReturnEvent requeue(CarriedCount carried, std::int64_t now = kT0) {
  return ReturnEvent{.wall_ms = now, .steady_ms = now, .carried = carried};
}

ReturnEvent crash(CarriedCount carried, bool solo, std::int64_t now = kT0) {
  return ReturnEvent{
      .wall_ms = now, .steady_ms = now, .carried = carried, .crash = true, .solo = solo};
}

Circumstances classic() {
  Circumstances c;
  c.broker_limit = std::nullopt;
  return c;
}

// A fresh message's outcomes under immediate_policy(3, 100): three redeliveries, and 100
// returns allowed in the rate window.
class OutcomeTest : public test::DecisionTest<3, 100> {};

// ---- a consumer's requeue ----

TEST_F(OutcomeTest, AFirstReturnIsForwardedTheRedeliveredFlagCarriesIt) {
  const Outcome out = decide_requeue(policy, entry, requeue({}), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_EQ(out.decision.returns, 1u);
  EXPECT_EQ(out.fallback, FallbackCause::none);
}

TEST_F(OutcomeTest, AReturnTheFlagCannotCarryIsRepublishedWithItsCount) {
  // Redelivered already: the flag stands for the first return, a second needs a copy.
  const Outcome out = decide_requeue(policy, entry, requeue({.redelivered = true}), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::republish);
  EXPECT_EQ(out.decision.returns, 2u);
  EXPECT_FALSE(out.decision.suspect);
}

TEST_F(OutcomeTest, ACopysFirstReturnIsForwardedAgain) {
  const Outcome out =
      decide_requeue(policy, entry, requeue({.nackguard = 2, .copy_id = 9}), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_EQ(out.decision.returns, 3u);
}

TEST_F(OutcomeTest, PastTheLimitItIsDeadLettered) {
  const Outcome out = decide_requeue(
      policy, entry, requeue({.nackguard = 2, .copy_id = 9, .redelivered = true}), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::dead_letter);
  EXPECT_EQ(out.decision.reason, DeadLetterReason::max_redeliveries);
  EXPECT_EQ(out.decision.returns, 4u);
}

TEST_F(OutcomeTest, PastBothLimitsTheReasonSaysTheBrokersToo) {
  Circumstances c;
  c.broker_limit = 20;
  const Outcome out = decide_requeue(
      policy, entry, requeue({.nackguard = 3, .broker = 19, .redelivered = true}), c, rng);
  EXPECT_EQ(out.decision.action, Action::dead_letter);
  EXPECT_EQ(out.decision.reason, DeadLetterReason::broker_delivery_limit);
  EXPECT_TRUE(out.at_broker_limit);
}

TEST_F(OutcomeTest, AReturnThatCouldPassTheBrokersLimitIsNeverForwarded) {
  Circumstances c;
  c.broker_limit = 1;  // a first return plus one the consumer never sees would pass it
  const Outcome out = decide_requeue(policy, entry, requeue({}), c, rng);
  EXPECT_EQ(out.decision.action, Action::republish);
  EXPECT_TRUE(out.at_broker_limit);
}

TEST_F(OutcomeTest, AnUnknownLimitIsAssumedTight) {
  Circumstances c;
  c.broker_limit = kAssumedBrokerLimit;
  EXPECT_FALSE(decide_requeue(policy, entry, requeue({}), c, rng).at_broker_limit);
  TrackerEntry other;
  const Outcome out =
      decide_requeue(policy, other, requeue({.broker = 1, .redelivered = true}), c, rng);
  EXPECT_TRUE(out.at_broker_limit);
  EXPECT_EQ(out.decision.action, Action::republish);
}

TEST_F(OutcomeTest, DelayedPolicyDelays) {
  policy.requeue = RequeueMode::delayed;
  const Outcome out = decide_requeue(policy, entry, requeue({}), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::delay);
  EXPECT_EQ(out.decision.delay, Millis(1000));
}

TEST_F(OutcomeTest, ACopyThatCannotBeMadeFallsBackToTheConsumersFrame) {
  Circumstances c = classic();
  c.body_kept = false;
  Outcome out = decide_requeue(policy, entry, requeue({.redelivered = true}), c, rng);
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_EQ(out.fallback, FallbackCause::body_not_retained);
  EXPECT_EQ(out.wanted, Action::republish);

  c = classic();
  c.proxy_channel = false;
  TrackerEntry second;
  out = decide_requeue(policy, second, requeue({.redelivered = true}), c, rng);
  EXPECT_EQ(out.fallback, FallbackCause::no_channel);
}

TEST_F(OutcomeTest, CopiesFailingStopDelaysButNotARepublishIntoTheQueue) {
  policy.requeue = RequeueMode::delayed;
  Circumstances c = classic();
  c.copies_failing = true;
  Outcome out = decide_requeue(policy, entry, requeue({}), c, rng);
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_EQ(out.fallback, FallbackCause::republish_failed);
  // At the broker's limit a republish needs no DLQ nor delay queue: it goes ahead.
  c.broker_limit = 20;
  TrackerEntry second;
  out = decide_requeue(policy, second, requeue({.broker = 19, .redelivered = true}), c, rng);
  EXPECT_EQ(out.decision.action, Action::republish);
  EXPECT_EQ(out.fallback, FallbackCause::none);
}

TEST_F(OutcomeTest, AFirstDeliveryWithoutItsBodyInAnOutageIsForwardedUncounted) {
  Circumstances c = classic();
  c.body_kept = false;
  c.body_skipped = true;
  ReturnEvent event = requeue({});
  event.outage = true;
  const Outcome out = decide_requeue(policy, entry, event, c, rng);
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_EQ(out.fallback, FallbackCause::body_skipped);
  EXPECT_EQ(out.decision.returns, 0u);
  // Its redelivered flag stands for no return, here.
  EXPECT_EQ(count_base(&entry, {.redelivered = true}), 0u);
}

TEST_F(OutcomeTest, DeadLetterByRejectNeedsNoCopy) {
  policy.dead_letter.via = DeadLetter::Via::reject;
  Circumstances c = classic();
  c.body_kept = false;
  c.reject_dead_letters = true;
  const Outcome out =
      decide_requeue(policy, entry, requeue({.nackguard = 3, .copy_id = 1}), c, rng);
  EXPECT_EQ(out.decision.action, Action::dead_letter);
  EXPECT_EQ(out.fallback, FallbackCause::none);
}

// ---- a crash ----

TEST_F(OutcomeTest, ACrashOfAFirstDeliveryLeavesItToTheBrokersRequeue) {
  const Outcome out = decide_crash(policy, entry, crash({}, false), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_EQ(out.decision.returns, 1u);
  EXPECT_TRUE(entry.crash_suspect);
}

TEST_F(OutcomeTest, ASoloCrashOfARedeliveryIsTakenOverWithItsCount) {
  const Outcome out =
      decide_crash(policy, entry, crash({.redelivered = true}, true), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::republish);
  EXPECT_EQ(out.decision.returns, 2u);
  EXPECT_TRUE(out.decision.suspect);  // the copy is handed out alone wherever it goes
}

TEST_F(OutcomeTest, ASoloCrashPastTheLimitIsACrashLoop) {
  const Outcome out =
      decide_crash(policy, entry, crash({.nackguard = 3, .copy_id = 4}, true), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::dead_letter);
  EXPECT_EQ(out.decision.reason, DeadLetterReason::crash_loop);
  EXPECT_EQ(out.decision.returns, 4u);
}

TEST_F(OutcomeTest, ACrashWithSeveralInHandNeverDeadLetters) {
  // Invariant 2: the culprit is not known; each stays at the limit, a suspect.
  Outcome out =
      decide_crash(policy, entry, crash({.nackguard = 3, .copy_id = 4}, false), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_EQ(out.decision.returns, 3u);
  EXPECT_TRUE(entry.crash_suspect);
  TrackerEntry redelivered;
  out = decide_crash(policy, redelivered,
                     crash({.nackguard = 3, .copy_id = 4, .redelivered = true}, false), classic(),
                     rng);
  EXPECT_EQ(out.decision.action, Action::republish);
  EXPECT_EQ(out.decision.returns, 3u);
}

TEST_F(OutcomeTest, AConsumerTimeoutPastTheLimitSaysSo) {
  ReturnEvent event = crash({.nackguard = 3, .copy_id = 4}, false);
  event.consumer_timeout = true;
  const Outcome out = decide_crash(policy, entry, event, classic(), rng);
  EXPECT_EQ(out.decision.action, Action::dead_letter);
  EXPECT_EQ(out.decision.reason, DeadLetterReason::consumer_timeout);
}

TEST_F(OutcomeTest, ACrashThatCannotBeTakenOverLeavesItsDecisionPending) {
  policy.requeue = RequeueMode::delayed;
  Circumstances c = classic();
  c.take_over_at_crash = false;  // the broker closed the channel itself
  const Outcome out = decide_crash(policy, entry, crash({}, true), c, rng);
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_EQ(entry.pending_action, Action::delay);
  EXPECT_EQ(entry.pending_delay_ms, 1000u);
}

// A recover past the limit waits for the next delivery like a crash's return, but the
// consumer gave the message back itself: no suspect, and the reason is max_redeliveries.
TEST_F(OutcomeTest, ARecoverPastTheLimitLeavesAMaxRedeliveriesDeadLetterPending) {
  Circumstances c = classic();
  c.take_over_at_crash = false;  // a recover has the broker requeue everything at once
  const Outcome out =
      decide_recover(policy, entry, crash({.nackguard = 3, .copy_id = 4}, true), c, rng);
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_EQ(entry.pending_action, Action::dead_letter);
  EXPECT_EQ(entry.pending_reason, DeadLetterReason::max_redeliveries);
  EXPECT_FALSE(entry.crash_suspect);
  TrackerEntry crashed;
  decide_crash(policy, crashed, crash({.nackguard = 3, .copy_id = 4}, true), c, rng);
  EXPECT_EQ(crashed.pending_reason, DeadLetterReason::crash_loop);
  EXPECT_TRUE(crashed.crash_suspect);
}

TEST_F(OutcomeTest, ACrashUnderDelayedRequeueIsDelayedAtTheCrash) {
  policy.requeue = RequeueMode::delayed;
  const Outcome out = decide_crash(policy, entry, crash({}, false), classic(), rng);
  EXPECT_EQ(out.decision.action, Action::delay);
  EXPECT_TRUE(out.decision.suspect);
  EXPECT_EQ(entry.pending_action, Action::forward);
}

TEST_F(OutcomeTest, AReturnThatWasNotTheMessagesDoingCountsNothing) {
  note_uncounted_return(entry, {.nackguard = 2, .copy_id = 5});
  EXPECT_EQ(count_base(&entry, {.nackguard = 2, .copy_id = 5, .redelivered = true}), 2u);
  const Outcome out = decide_delivery(
      policy, &entry, {.nackguard = 2, .copy_id = 5, .redelivered = true}, classic());
  EXPECT_FALSE(out.suspect);
}

// ---- a delivery ----

TEST_F(OutcomeTest, ASuspectIsACopyMadeAtACrashOrOneTheEntryNames) {
  EXPECT_TRUE(decide_delivery(policy, nullptr, {.suspect = true}, classic()).suspect);
  decide_crash(policy, entry, crash({}, false), classic(), rng);
  const Outcome out = decide_delivery(policy, &entry, {.redelivered = true}, classic());
  EXPECT_EQ(out.decision.action, Action::forward);
  EXPECT_TRUE(out.suspect);
  // A redelivery alone says nothing: most are requeues, and handing each out alone would
  // slow every consumer that requeues a share of its messages.
  EXPECT_FALSE(decide_delivery(policy, nullptr, {.redelivered = true}, classic()).suspect);
}

TEST_F(OutcomeTest, ARecordOfAForwardedRequeueIsNoSuspect) {
  decide_requeue(policy, entry, requeue({}), classic(), rng);
  EXPECT_FALSE(decide_delivery(policy, &entry, {.redelivered = true}, classic()).suspect);
}

TEST_F(OutcomeTest, ADeliveryIsNeverDeadLetteredOnItsCountAlone) {
  // Held back and returned by crashes, sent back uncounted after a broker's loss: a count
  // may hold a return that was no fault of the message. Its next return decides.
  const Outcome out = decide_delivery(
      policy, nullptr, {.nackguard = 9, .broker = 9, .copy_id = 2, .redelivered = true}, classic());
  EXPECT_EQ(out.decision.action, Action::forward);
}

TEST_F(OutcomeTest, APendingDecisionIsCarriedOutAtTheDelivery) {
  policy.requeue = RequeueMode::delayed;
  Circumstances c = classic();
  c.take_over_at_crash = false;
  decide_crash(policy, entry, crash({}, true), c, rng);
  const Outcome out = decide_delivery(policy, &entry, {.redelivered = true}, classic());
  EXPECT_EQ(out.decision.action, Action::delay);
  EXPECT_EQ(out.decision.delay, Millis(1000));
  // Not when its copies are failing: the consumer gets it, as without the proxy.
  Circumstances failing = classic();
  failing.copies_failing = true;
  EXPECT_EQ(decide_delivery(policy, &entry, {.redelivered = true}, failing).decision.action,
            Action::forward);
  // Not for another copy of the message: the entry is stale.
  EXPECT_EQ(
      decide_delivery(policy, &entry, {.nackguard = 1, .copy_id = 3}, classic()).decision.action,
      Action::forward);
}

TEST_F(OutcomeTest, ADeliveryNearTheBrokersLimitIsRepublishedWithItsCount) {
  Circumstances c;
  c.broker_limit = 20;
  EXPECT_EQ(
      decide_delivery(policy, nullptr, {.broker = 18, .redelivered = true}, c).decision.action,
      Action::forward);
  const Outcome out = decide_delivery(policy, nullptr, {.broker = 19, .redelivered = true}, c);
  EXPECT_EQ(out.decision.action, Action::republish);
  EXPECT_EQ(out.decision.returns, 1u);  // what the flag stood for, now in the copy
  EXPECT_FALSE(out.decision.suspect);
  // An unknown limit (a RabbitMQ policy may have set one): any count is near it.
  c.broker_limit = kAssumedBrokerLimit;
  EXPECT_EQ(decide_delivery(policy, nullptr, {.broker = 1, .redelivered = true}, c).decision.action,
            Action::republish);
  c.proxy_channel = false;  // no copy possible: handed out as without the proxy
  EXPECT_EQ(decide_delivery(policy, nullptr, {.broker = 1, .redelivered = true}, c).decision.action,
            Action::forward);
}

TEST(FallbackCauseNames, AsTheMetricsLabelThem) {
  EXPECT_EQ(to_string(FallbackCause::body_not_retained), "body_not_retained");
  EXPECT_EQ(to_string(FallbackCause::no_channel), "no_channel");
  EXPECT_EQ(to_string(FallbackCause::republish_failed), "republish_failed");
}

}  // namespace
}  // namespace nackguard::retry
