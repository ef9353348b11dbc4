// The replay's decisions against a fake broker: what moves, what stays and is looked at only
// once, when a run stops, and that an original is acked only after its copy's confirm.
#include "proxy/replay/replayer.hpp"

#include <gtest/gtest.h>

#include "proxy/replay/rewrite.hpp"
#include "replay/fake_broker.hpp"

namespace nackguard::replay {
namespace {

using amqp::FieldValue;
using namespace std::chrono_literals;
using namespace replay_test;

using Log = std::vector<std::string>;

TEST(Replayer, MovesEveryMessageAndAcksEachOnlyAfterItsConfirm) {
  FakeBroker broker({dead_letter("a"), dead_letter("b", "crash_loop")});
  Summary s = run(broker, plan_for(broker));
  EXPECT_EQ(broker.log, (Log{"get a", "publish a", "confirm 1", "ack 1", "get b", "publish b",
                             "confirm 2", "ack 2", "empty", "requeue"}));
  EXPECT_EQ(s.moved, 2u);
  EXPECT_EQ(s.looked_at, 2u);
  EXPECT_EQ(s.stop, StopReason::queue_empty);
  EXPECT_EQ(s.groups[{"max_redeliveries"}].moved, 1u);
  EXPECT_EQ(s.groups[{"crash_loop"}].moved, 1u);
  EXPECT_TRUE(broker.ready.empty());
  EXPECT_TRUE(broker.unacked.empty());
  ASSERT_EQ(broker.published.size(), 2u);
  for (const Message& copy : broker.published) {
    EXPECT_EQ(replays_of(copy.header.properties), 1);
    EXPECT_EQ(copy.header.properties.headers->find("x-nackguard-returns"), nullptr);
    EXPECT_EQ(std::string(amqp::as_chars(copy.body)), id_of(copy.header));
  }
}

TEST(Replayer, KeepsCopiesInFlightAndAcksOriginalsAsTheirConfirmsArrive) {
  FakeBroker broker({dead_letter("a"), dead_letter("b"), dead_letter("c")});
  broker.eager = false;  // confirms come only when the replayer waits for them
  Summary s = run(broker, plan_for(broker));
  EXPECT_EQ(broker.log,
            (Log{"get a", "publish a", "get b", "publish b", "get c", "publish c", "empty",
                 "confirm 1", "confirm 2", "confirm 3", "ack 1", "ack 2", "ack 3", "requeue"}));
  EXPECT_EQ(s.moved, 3u);
  EXPECT_EQ(broker.max_unconfirmed, 3u);
}

TEST(Replayer, WaitsForConfirmsWhenTheWindowIsFull) {
  std::vector<Message> messages;
  for (int i = 0; i < 10; ++i) messages.push_back(dead_letter("m" + std::to_string(i)));
  FakeBroker broker(messages);
  broker.eager = false;
  Plan plan = plan_for(broker);
  plan.window = 4;
  Summary s = run(broker, plan);
  EXPECT_EQ(s.moved, 10u);
  EXPECT_EQ(broker.max_unconfirmed, 4u);
  EXPECT_TRUE(broker.unacked.empty());
}

TEST(Replayer, AnEmptyQueueEndsTheRunAtOnce) {
  FakeBroker broker({});
  Summary s = run(broker, plan_for(broker));
  EXPECT_EQ(s.stop, StopReason::queue_empty);
  EXPECT_EQ(broker.log, (Log{"empty", "requeue"}));
}

TEST(Replayer, AMessageDeadLetteredDuringTheRunIsMovedToo) {
  FakeBroker broker({dead_letter("a")});
  Plan plan = plan_for(broker);
  broker.ready.push_back(dead_letter("new"));  // not seen in this run: not a loop
  Summary s = run(broker, plan);
  EXPECT_EQ(s.moved, 2u);
  EXPECT_EQ(s.stop, StopReason::queue_empty);
}

TEST(Replayer, MessagesAtTheCeilingStayUnackedUntilTheEndAndAreLookedAtOnce) {
  FakeBroker broker({dead_letter("a", "max_redeliveries", 3), dead_letter("b"),
                     dead_letter("c", "crash_loop", 7)});
  Summary s = run(broker, plan_for(broker));
  EXPECT_EQ(broker.log, (Log{"get a", "get b", "publish b", "confirm 1", "ack 2", "get c", "empty",
                             "requeue 1 3"}));
  EXPECT_EQ(s.at_ceiling, 2u);
  EXPECT_EQ(s.moved, 1u);
  EXPECT_EQ(s.requeued, 2u);
  EXPECT_EQ(s.ceiling_labels, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(s.groups[{"crash_loop"}].at_ceiling, 1u);
  EXPECT_EQ(s.groups[{"max_redeliveries"}].at_ceiling, 1u);
  ASSERT_EQ(broker.ready.size(), 2u);  // back in the DLQ, unchanged
  EXPECT_EQ(replays_of(broker.ready[0].header.properties), 3);
  EXPECT_NE(broker.ready[0].header.properties.headers->find("x-nackguard-returns"), nullptr);
}

TEST(Replayer, MaxReplaysIsTheCeiling) {
  FakeBroker broker({dead_letter("a", "r", 1), dead_letter("b", "r", 0)});
  Plan plan = plan_for(broker);
  plan.max_replays = 1;
  Summary s = run(broker, plan);
  EXPECT_EQ(s.at_ceiling, 1u);
  EXPECT_EQ(s.moved, 1u);
  ASSERT_EQ(broker.published.size(), 1u);
  EXPECT_EQ(id_of(broker.published[0].header), "b");
}

TEST(Replayer, DryRunMovesNothingAndCountsByReason) {
  FakeBroker broker({dead_letter("a"), dead_letter("b", "crash_loop"), dead_letter("c"),
                     dead_letter("d", "crash_loop", 3)});
  Plan plan = plan_for(broker);
  plan.dry_run = true;
  Summary s = run(broker, plan);
  EXPECT_TRUE(broker.published.empty());
  EXPECT_EQ(broker.log, (Log{"get a", "get b", "get c", "get d", "empty", "requeue 1 2 3 4"}));
  EXPECT_TRUE(s.dry_run);
  EXPECT_EQ(s.moved, 3u);
  EXPECT_EQ(s.at_ceiling, 1u);
  EXPECT_EQ(s.groups[{"max_redeliveries"}].moved, 2u);
  EXPECT_EQ(s.groups[{"crash_loop"}].moved, 1u);
  EXPECT_EQ(s.groups[{"crash_loop"}].at_ceiling, 1u);
  EXPECT_EQ(broker.ready.size(), 4u);
}

// Each message a run leaves in place is returned once more; on a RabbitMQ 4.0 quorum DLQ
// with its default delivery limit, the 21st return drops it. The run says which it requeued
// that were returned often already.
TEST(Replayer, CountsTheMessagesItRequeuesThatWereReturnedOften) {
  auto returned = [](Message m, std::int64_t count) {
    m.header.properties.headers->set("x-delivery-count", FieldValue::i64(count));
    return m;
  };
  FakeBroker broker({returned(dead_letter("a"), 9), returned(dead_letter("b"), 10),
                     dead_letter("c"), returned(dead_letter("d"), 17)});
  Plan plan = plan_for(broker);
  plan.dry_run = true;
  Summary s = run(broker, plan);
  EXPECT_EQ(s.requeued, 4u);
  EXPECT_EQ(s.requeued_often, 2u);
  EXPECT_EQ(s.most_returns, 17);

  FakeBroker moving({returned(dead_letter("a"), 12), returned(dead_letter("b"), 30)});
  Summary moved = run(moving, plan_for(moving));
  EXPECT_EQ(moved.moved, 2u);
  EXPECT_EQ(moved.requeued_often, 0u) << "moved messages are not requeued";
  EXPECT_EQ(moved.most_returns, 0);
}

TEST(Replayer, DryRunWithALimitCountsThatMany) {
  FakeBroker broker({dead_letter("a"), dead_letter("b"), dead_letter("c")});
  Plan plan = plan_for(broker);
  plan.dry_run = true;
  plan.limit = 2;
  Summary s = run(broker, plan);
  EXPECT_EQ(s.moved, 2u);
  EXPECT_EQ(s.stop, StopReason::limit_reached);
  EXPECT_EQ(broker.ready.size(), 3u);
}

// A run that stops after `limit` moves.
Summary run_with_limit(FakeBroker& broker, std::uint64_t limit) {
  Plan plan = plan_for(broker);
  plan.limit = limit;
  return run(broker, plan);
}

TEST(Replayer, LimitMovesAtMostNAndLeavesTheRestUntouched) {
  FakeBroker broker({dead_letter("a"), dead_letter("b"), dead_letter("c"), dead_letter("d")});
  broker.eager = false;
  Summary s = run_with_limit(broker, 2);
  EXPECT_EQ(s.moved, 2u);
  EXPECT_EQ(s.looked_at, 2u);
  EXPECT_EQ(s.stop, StopReason::limit_reached);
  EXPECT_EQ(broker.published.size(), 2u);
  EXPECT_EQ(broker.ready.size(), 2u);
}

TEST(Replayer, LimitReplacesCopiesThatFailedInFlight) {
  FakeBroker broker({dead_letter("a"), dead_letter("b"), dead_letter("c")});
  broker.eager = false;
  broker.outcomes = {{CopyOutcome::Kind::nacked, "nack"}};
  Summary s = run_with_limit(broker, 2);
  EXPECT_EQ(s.moved, 2u);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_EQ(s.stop, StopReason::limit_reached);
  EXPECT_EQ(broker.published.size(), 2u);
}

TEST(Replayer, LimitCountsOnlyMovesNotMessagesAtTheCeiling) {
  FakeBroker broker({dead_letter("a", "r", 3), dead_letter("b"), dead_letter("c")});
  Summary s = run_with_limit(broker, 1);
  EXPECT_EQ(s.moved, 1u);
  EXPECT_EQ(s.at_ceiling, 1u);
  EXPECT_EQ(broker.ready.size(), 2u);  // a (requeued) and c (never taken)
}

TEST(Replayer, ACopyThatIsNotAcceptedLeavesTheOriginalAndIsReported) {
  FakeBroker broker({dead_letter("a"), dead_letter("b"), dead_letter("c")});
  broker.outcomes = {{CopyOutcome::Kind::confirmed, ""},
                     {CopyOutcome::Kind::returned, "the broker returned the copy: 312 NO_ROUTE"},
                     {CopyOutcome::Kind::nacked, "the broker nacked the copy"}};
  Summary s = run(broker, plan_for(broker));
  EXPECT_EQ(broker.log,
            (Log{"get a", "publish a", "confirm 1", "ack 1", "get b", "publish b", "confirm 2",
                 "get c", "publish c", "confirm 3", "empty", "requeue 2 3"}));
  EXPECT_EQ(s.moved, 1u);
  EXPECT_EQ(s.failed, 2u);
  ASSERT_EQ(s.failures.size(), 2u);
  EXPECT_EQ(s.failures[0].label, "b");
  EXPECT_EQ(s.failures[0].why, "the broker returned the copy: 312 NO_ROUTE");
  EXPECT_EQ(s.groups[{"max_redeliveries"}].failed, 2u);
  EXPECT_EQ(broker.ready.size(), 2u);
}

TEST(Replayer, StopsAfterTooManyFailuresInARow) {
  std::vector<Message> messages;
  for (int i = 0; i < 10; ++i) messages.push_back(dead_letter("m" + std::to_string(i)));
  FakeBroker broker(messages);
  for (int i = 0; i < 10; ++i) broker.outcomes.push_back({CopyOutcome::Kind::nacked, "nack"});
  Summary s = run(broker, plan_for(broker));
  EXPECT_EQ(s.failed, kMaxConsecutiveFailures);
  EXPECT_EQ(s.stop, StopReason::too_many_failures);
  EXPECT_EQ(broker.ready.size(), 10u);
}

TEST(Replayer, StopsWhenACopyComesBackDeadLetteredAgain) {
  FakeBroker broker({dead_letter("a"), dead_letter("b")});
  broker.dead_letter_copies_again = true;  // the consumer still fails at once
  Summary s = run(broker, plan_for(broker));
  EXPECT_EQ(s.stop, StopReason::came_back);
  EXPECT_EQ(s.moved, 2u);
  EXPECT_EQ(broker.published.size(), 2u);  // not a third time
  EXPECT_EQ(broker.ready.size(), 2u);      // both copies wait in the DLQ for the next run
}

TEST(Replayer, ACopyThatComesBackBeforeItsConfirmIsRecognised) {
  FakeBroker broker({dead_letter("a")});
  broker.eager = false;
  Replayer replayer(broker, plan_for(broker), [&broker] { return broker.now; });
  // The copy is consumed, fails and is dead-lettered again before its confirm.
  bool returned = false;
  replayer.run({}, [&broker, &returned](const Summary&) {
    if (!returned && !broker.unconfirmed.empty()) {
      broker.ready.push_back(broker.unconfirmed.back().second);
      returned = true;
    }
  });
  EXPECT_EQ(replayer.summary().stop, StopReason::came_back);
  EXPECT_EQ(replayer.summary().moved, 1u);
  EXPECT_EQ(broker.ready.size(), 1u);
}

TEST(Replayer, IdenticalMessagesAreNotMistakenForOnesThatCameBack) {
  FakeBroker broker({dead_letter("same"), dead_letter("same"), dead_letter("same")});
  Summary s = run(broker, plan_for(broker));
  EXPECT_EQ(s.moved, 3u);
  EXPECT_EQ(s.stop, StopReason::queue_empty);
}

TEST(Replayer, RunningAgainMovesOnlyWhatCameBackSince) {
  FakeBroker broker({dead_letter("a"), dead_letter("b", "r", 3)});
  Summary first = run(broker, plan_for(broker));
  EXPECT_EQ(first.moved, 1u);
  Summary second = run(broker, plan_for(broker));
  EXPECT_EQ(second.moved, 0u);
  EXPECT_EQ(second.at_ceiling, 1u);
  EXPECT_EQ(broker.published.size(), 1u);

  broker.ready.push_back(broker.published[0]);  // the moved one failed again meanwhile
  Summary third = run(broker, plan_for(broker));
  EXPECT_EQ(third.moved, 1u);
  EXPECT_EQ(replays_of(broker.published.back().header.properties), 2);
}

TEST(Replayer, RateSpacesTheCopies) {
  FakeBroker broker({dead_letter("a"), dead_letter("b"), dead_letter("c")});
  Plan plan = plan_for(broker);
  plan.rate = 2.0;
  run(broker, plan);
  EXPECT_EQ(broker.waits, (std::vector<Clock::duration>{500ms, 1000ms}));
}

TEST(Replayer, RateDoesNotSlowADryRun) {
  FakeBroker broker({dead_letter("a"), dead_letter("b")});
  Plan plan = plan_for(broker);
  plan.rate = 1.0;
  plan.dry_run = true;
  run(broker, plan);
  EXPECT_TRUE(broker.waits.empty());
}

TEST(Replayer, InterruptionStopsBetweenMessagesAndRequeuesWhatItKept) {
  FakeBroker broker({dead_letter("a", "r", 5), dead_letter("b"), dead_letter("c")});
  int polls = 0;
  Summary s = run(broker, plan_for(broker), [&polls] { return ++polls > 2; });
  EXPECT_EQ(s.stop, StopReason::interrupted);
  EXPECT_EQ(s.looked_at, 2u);
  EXPECT_EQ(s.moved, 1u);
  EXPECT_EQ(broker.log.back(), "requeue 1");
  EXPECT_EQ(broker.ready.size(), 2u);
}

TEST(Replayer, ABrokerErrorPropagatesAndTheSummarySoFarRemains) {
  FakeBroker broker({dead_letter("a"), dead_letter("b")});
  Replayer replayer(broker, plan_for(broker), [&broker] { return broker.now; });
  int calls = 0;
  EXPECT_THROW(replayer.run({}, [&](const Summary&) { broker.fail_on_get = ++calls == 1; }),
               std::runtime_error);
  EXPECT_EQ(replayer.summary().moved, 1u);
  EXPECT_EQ(replayer.summary().stop, std::nullopt);
}

TEST(Replayer, ReportsProgressAfterEachMessageAndAtTheEnd) {
  FakeBroker broker({dead_letter("a"), dead_letter("b")});
  Replayer replayer(broker, plan_for(broker), [&broker] { return broker.now; });
  std::vector<std::pair<std::uint64_t, std::uint64_t>> progress;  // looked at, remaining
  replayer.run({}, [&](const Summary& s) { progress.emplace_back(s.looked_at, s.remaining); });
  EXPECT_EQ(progress,
            (std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 1}, {2, 0}, {2, 0}}));
}

TEST(RatePacer, NoBurstAfterIdleTime) {
  RatePacer pacer(10.0);
  const Clock::time_point t0{};
  EXPECT_EQ(pacer.take(t0), t0);
  EXPECT_EQ(pacer.take(t0), t0 + 100ms);
  EXPECT_EQ(pacer.take(t0 + 5s), t0 + 5s);
  EXPECT_EQ(pacer.take(t0 + 5s), t0 + 5s + 100ms);
}

}  // namespace
}  // namespace nackguard::replay
