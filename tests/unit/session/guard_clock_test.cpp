// The guard measures every duration on the steady clock and reads the wall clock only for the
// timestamps it writes into headers. Here the wall clock steps an hour forward (as NTP may do)
// while confirms are in flight, a declaration waits to be retried, tracker entries and rate
// and outage windows are alive: nothing times out or expires early, and the header timestamps
// do follow the wall clock.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using amqp::FieldValue;

constexpr std::int64_t kHour = 3'600'000;

class GuardClock : public GuardTest {};

TEST_F(GuardClock, ConfirmsInFlightDoNotTimeOutWhenTheWallClockSteps) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  EXPECT_EQ(take_copy(to_broker()).header_text("x-nackguard-reason"),
            text(FieldValue::string("max_redeliveries")));

  wall_step += kHour;
  conn->session.on_tick(now);
  EXPECT_TRUE(broker_bytes().empty());
  EXPECT_TRUE(listener.fallbacks.empty());

  // The confirm timeout (30 s) still runs on the steady clock.
  now += 29'999;
  conn->session.on_tick(now);
  EXPECT_TRUE(listener.fallbacks.empty());
  now += 1;
  conn->session.on_tick(now);
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_EQ(listener.fallbacks[0].detail, "no publisher confirm in time");
}

TEST_F(GuardClock, AConfirmAfterTheStepSettlesTheOriginal) {
  dead_letter_in_flight();
  wall_step += kHour;
  conn->session.on_tick(now);
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  EXPECT_TRUE(listener.fallbacks.empty());
  EXPECT_EQ(listener.dead_letters.size(), 1u);
}

TEST_F(GuardClock, DeclareRetryAndCopiesFailingWindowHoldAcrossTheStep) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  open_proxy_channel();
  broker(channel_close(403, "ACCESS_REFUSED - access to queue 'q.dlq' refused", 50, 10));
  reopen_proxy_channel();
  ASSERT_EQ(listener.fallbacks.size(), 1u);

  // An hour later by the wall clock, a second later in fact: the queue's copies still fail.
  wall_step += kHour;
  now += 1000;
  deliver_passes(delivery(2, message("m2")));
  client_passes(nack(kCh, 2));
  ASSERT_EQ(listener.fallbacks.size(), 2u);
  EXPECT_EQ(listener.fallbacks[1].detail,
            "copies for this queue failed moments ago (see the earlier fallback line)");

  // 30 s after the failure the DLQ is tried again.
  now += 29'000;
  deliver_passes(delivery(3, message("m3")));
  client(nack(kCh, 3));
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  EXPECT_EQ(listener.fallbacks.size(), 2u);
}

TEST_F(GuardClock, TrackerEntriesOutliveTheStepAndHeadersFollowTheWallClock) {
  retry::GuardSettings settings;
  settings.tracker_idle_ttl = std::chrono::minutes(10);
  start(policy(1), settings);
  deliver_passes(delivery(1, message("m1")));
  client_passes(nack(kCh, 1));  // return 1 of 1: forwarded

  wall_step += kHour;
  now += 1000;
  deliver_passes(delivery(2, message("m1"), true));
  client(nack(kCh, 2));  // return 2: past the limit, dead-lettered (the count was not forgotten)
  open_proxy_channel();
  broker(declare_ok("q.dlq"));
  const Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(FieldValue::i64(2)));
  EXPECT_EQ(copy.header_text("x-nackguard-first-return"), text(FieldValue::timestamp(kT0 / 1000)));
  EXPECT_EQ(copy.header_text("x-nackguard-last-return"),
            text(FieldValue::timestamp((kT0 + 1000 + kHour) / 1000)));
  confirm(1);
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].returns, 2u);
}

TEST_F(GuardClock, PerMessageRateWindowHoldsAcrossTheStep) {
  retry::Policy p = policy(10);
  p.rate.per_message = 1;
  p.rate.window = retry::Millis(10'000);
  start(p);
  deliver_passes(delivery(1, message("m1")));
  client_passes(nack(kCh, 1));  // 1 return in the window: forwarded
  wall_step += kHour;
  now += 1000;
  deliver_passes(delivery(2, message("m1"), true));
  client(nack(kCh, 2));  // the second within 10 s: delayed
  EXPECT_EQ(listener.requeues.size(), 1u);
  open_proxy_channel();
  broker(declare_ok("nackguard.delay.q.2000ms"));
  EXPECT_EQ(take_copy(to_broker()).publish.routing_key, "nackguard.delay.q.2000ms");
}

TEST_F(GuardClock, OutageWindowHoldsAcrossTheStep) {
  start(outage_policy(10, 10));
  fresh_deliveries_pass(1, 20);
  for (std::uint64_t tag = 1; tag <= 10; ++tag) client_passes(nack(kCh, tag));
  client(nack(kCh, 11));  // 11 of 20 messages returned: an outage
  ASSERT_EQ(listener.outages.size(), 1u);
  wall_step += kHour;
  now += 1000;
  client(nack(kCh, 12));  // still an outage: delayed, not counted
  EXPECT_EQ(listener.outages.size(), 1u);
  EXPECT_EQ(tracked("m12")->returns, 0u);
}

}  // namespace
}  // namespace nackguard::session::guard_test
