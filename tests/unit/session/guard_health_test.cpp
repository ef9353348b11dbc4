// Outage detection as the guard feeds it: distinct messages, not deliveries, so that one
// poison message requeued at once cannot make an outage of a quiet queue; and the outage
// start and end lines are not lost on the crash path.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using retry::Action;

class GuardHealth : public GuardTest {
 protected:
  // Under `p`, m1 to m3 pass and the client nacks m1, forwarded, then m2: 2 of 3 messages
  // returned, the start of an outage.
  void outage_at_the_second_of_three(const retry::Policy& p) {
    start(p);
    fresh_deliveries_pass(1, 3);
    client_passes(nack(kCh, 1));
    client(nack(kCh, 2));
    ASSERT_EQ(listener.outages.size(), 1u);
    EXPECT_TRUE(listener.outages[0].started);
  }
};

// Issue 12: 2 good messages and 1 poison, max_redeliveries 30, per_message 1000 and the
// default outage settings (min 20, ratio 0.5). Counting deliveries, the poison's own
// redeliveries made an outage at the 20th and it was delayed instead of dead-lettered.
TEST_F(GuardHealth, OnePoisonRequeuedAtOnceIsDeadLetteredAfterExactlyMaxPlusOneDeliveries) {
  retry::Policy p = policy(30);
  p.rate = retry::RateLimits{};
  p.rate.per_message = 1000;
  start(p);
  deliver_passes(delivery(1, message("good-1")));
  client_passes(ack(kCh, 1));
  deliver_passes(delivery(2, message("good-2")));
  client_passes(ack(kCh, 2));
  std::uint64_t tag = 3;
  std::uint64_t seq = 0;
  Next next{message("poison"), false};
  deliver_passes(delivery(tag, next.message));
  for (int returns = 1; returns <= 30; ++returns) {
    next = nack_under_the_limit(tag, next.message, &seq);
    next_passes(++tag, next.message, next.redelivered);
  }
  EXPECT_EQ(tag, 33u);     // 31 deliveries of the poison
  client(nack(kCh, tag));  // the 31st return: dead-lettered
  std::vector<Wire> declare = to_broker();
  EXPECT_EQ(declare, frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  const Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.publish.routing_key, "q.dlq");
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(31)));
  confirm(++seq);
  EXPECT_EQ(to_broker(), frames({ack(kCh, tag)}));
  EXPECT_TRUE(listener.outages.empty());
  // Each return the redelivered flag can carry is forwarded, the others go back as copies.
  std::vector<Action> expected;
  for (int i = 0; i < 15; ++i) {
    expected.push_back(Action::forward);
    expected.push_back(Action::republish);
  }
  expected.push_back(Action::dead_letter);
  EXPECT_EQ(listener.requeues, expected);
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].returns, 31u);
  EXPECT_EQ(context->health().state(kQueue, p.rate, now).messages, 3u);
}

// A crash reads the queue's state without counting (it counts once per crash, in
// on_returns_done). The outage ended while nobody looked; that end must still be reported,
// or the outage gauge stays at 1.
TEST_F(GuardHealth, OutageEndSeenFirstByACrashIsStillReported) {
  ASSERT_NO_FATAL_FAILURE(outage_at_the_second_of_three(outage_policy(10, 3)));
  now += 10'000;                       // the window slides past all of it
  conn->session.on_eof(Side::client);  // m3 unacked, m2's delay not yet declared
  ASSERT_EQ(listener.outages.size(), 2u);
  EXPECT_FALSE(listener.outages[1].started);
  EXPECT_TRUE(context->health().queues_in_outage().empty());
}

// The copies an outage delays carry x-nackguard-returns 0. Coming back, each is a message seen
// before: counted as new at every pass, they would dilute the ratio until the outage seemed to
// end while every message still failed.
TEST_F(GuardHealth, DelayedCopiesComingBackAreNotNewMessages) {
  const retry::Policy p = outage_policy(10, 3);
  // m2's return is delayed: its copy carries x-nackguard-returns 0.
  ASSERT_NO_FATAL_FAILURE(outage_at_the_second_of_three(p));
  broker_bytes();
  for (std::uint64_t tag = 4; tag <= 8; ++tag) {
    retry_passes(delivery(tag, message("m2", 0)));
  }
  EXPECT_EQ(context->health().state(kQueue, p.rate, now).messages, 3u);
  EXPECT_EQ(listener.outages.size(), 1u);
}

}  // namespace
}  // namespace nackguard::session::guard_test
