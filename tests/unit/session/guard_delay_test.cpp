// Delayed requeues through a real Session and Guard: a copy goes to a per-TTL delay queue
// that dead-letters back into the queue, and the original is acked after the confirm. Also
// the per-message rate limit and the queue-wide outage, which both turn returns into delays.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using amqp::FieldValue;
using retry::Action;

std::uint64_t seconds(std::int64_t ms) {
  return static_cast<std::uint64_t>(ms / 1000);
}

// A durable declaration of the delay queue for `ttl_ms`, its arguments checked by name.
void expect_delay_declare(const std::vector<Wire>& sent, std::int64_t ttl_ms) {
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_TRUE(sent[0].is(mid::queue_declare)) << sent[0];
  EXPECT_EQ(sent[0].channel, kProxyChannel);
  amqp::QueueDeclare d = as<amqp::QueueDeclare>(sent[0]);
  EXPECT_EQ(d.queue, "nackguard.delay.q." + std::to_string(ttl_ms) + "ms");
  EXPECT_FALSE(d.passive);
  EXPECT_TRUE(d.durable);
  EXPECT_FALSE(d.exclusive);
  EXPECT_FALSE(d.auto_delete);
  EXPECT_FALSE(d.no_wait);
  amqp::FieldTable expected = delay_arguments(ttl_ms);
  EXPECT_EQ(d.arguments.entries.size(), expected.entries.size());
  for (const auto& [name, value] : expected.entries) {
    const FieldValue* got = d.arguments.find(name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_EQ(*got, value) << name;
  }
}

class GuardDelay : public GuardTest {
 protected:
  static retry::Policy delayed(std::uint32_t max_redeliveries = 10) {
    retry::Policy p = policy(max_redeliveries);
    p.requeue = retry::RequeueMode::delayed;
    return p;  // jitter none, initial 1 s, multiplier 2
  }
};

TEST_F(GuardDelay, EachReturnGoesToTheDelayQueueOfItsBackoff) {
  start(delayed());
  const Message m = message("m1");
  deliver_passes(delivery(1, m));
  now += 1000;
  const std::int64_t first_return = now;
  client(nack(kCh, 1));
  expect_delay_declare(open_proxy_channel(), 1000);
  broker(declare_ok("nackguard.delay.q.1000ms"));
  std::vector<Wire> sent = to_broker();
  Copy first = take_copy(sent);
  EXPECT_EQ(first.frames, sent.size());
  EXPECT_EQ(first.publish.exchange, "");
  EXPECT_EQ(first.publish.routing_key, "nackguard.delay.q.1000ms");
  EXPECT_TRUE(first.publish.mandatory);
  EXPECT_EQ(first.body, bytes_of(m.body));
  EXPECT_EQ(without_headers(first.header.properties), without_headers(m.properties));
  EXPECT_EQ(first.header_text("x-nackguard-returns"), text(FieldValue::i64(1)));
  EXPECT_EQ(first.header_text("x-nackguard-first-return"),
            text(FieldValue::timestamp(seconds(first_return))));
  EXPECT_EQ(first.header_text("x-original-exchange"), text(FieldValue::string("ex")));
  EXPECT_EQ(first.header_text("x-original-routingKey"), text(FieldValue::string("rk")));
  // Not a dead-letter: no reason, queue or last-return.
  EXPECT_EQ(first.header_text("x-nackguard-reason"), "absent");
  EXPECT_EQ(first.header_text("x-nackguard-queue"), "absent");
  EXPECT_EQ(first.header_text("x-nackguard-last-return"), "absent");
  EXPECT_EQ(first.header_text("x-nackguard-deliveries"), text(FieldValue::i64(1)));
  // The queue it counts in, and which copy it is: a random number, never 0.
  EXPECT_EQ(first.header_text("x-nackguard-returns-queue"), text(FieldValue::string("q")));
  ASSERT_NE(first.header_value("x-nackguard-copy-id"), nullptr);
  EXPECT_NE(first.header_value("x-nackguard-copy-id")->as_int().value_or(0), 0);
  EXPECT_EQ(first.header_text("x-nackguard-suspect"), "absent");
  EXPECT_EQ(first.header.properties.headers->entries.size(), 2u + 7u);
  EXPECT_TRUE(listener.requeues.empty());

  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  EXPECT_EQ(listener.requeues, std::vector<Action>{Action::delay});

  // The TTL expires; the delay queue dead-letters the copy into "q" by the default exchange.
  // It is a new message to the broker, carrying the count in its headers.
  retry_passes(delivery(2, first.header.properties, amqp::as_chars(first.body), false, "", "q"));
  now += 1000;
  client(nack(kCh, 2));
  // The channel is ready: only the next tier's queue to declare.
  expect_delay_declare(to_broker(), 2000);
  broker(declare_ok("nackguard.delay.q.2000ms"));
  sent = to_broker();
  Copy second = take_copy(sent);
  EXPECT_EQ(second.frames, sent.size());
  EXPECT_EQ(second.publish.routing_key, "nackguard.delay.q.2000ms");
  EXPECT_EQ(second.header_text("x-nackguard-returns"), text(FieldValue::i64(2)));
  EXPECT_EQ(second.header_text("x-nackguard-first-return"),
            text(FieldValue::timestamp(seconds(first_return))));
  // The route it first took, not the delay queue's.
  EXPECT_EQ(second.header_text("x-original-exchange"), text(FieldValue::string("ex")));
  EXPECT_EQ(second.header_text("x-original-routingKey"), text(FieldValue::string("rk")));
  // Delivered once as the original and once as the copy.
  EXPECT_EQ(second.header_text("x-nackguard-deliveries"), text(FieldValue::i64(2)));
  EXPECT_EQ(second.header.properties.headers->entries.size(), 2u + 7u);
  // Another copy: another id.
  EXPECT_NE(second.header_text("x-nackguard-copy-id"), first.header_text("x-nackguard-copy-id"));
  EXPECT_EQ(second.body, bytes_of(m.body));

  confirm(2);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  EXPECT_EQ(listener.requeues, (std::vector<Action>{Action::delay, Action::delay}));
  ASSERT_TRUE(tracked("m1"));
  EXPECT_EQ(tracked("m1")->returns, 2u);
  EXPECT_TRUE(client_bytes().empty());
}

TEST_F(GuardDelay, DelayQueueIsDeclaredAgainOncePerTtl) {
  start(delayed());
  for (std::uint64_t tag = 1; tag <= 3; ++tag) {
    deliver_passes(delivery(tag, message("m" + std::to_string(tag))));
  }
  client(nack(kCh, 1));
  expect_delay_declare(open_proxy_channel(), 1000);
  broker(declare_ok("nackguard.delay.q.1000ms"));
  EXPECT_EQ(take_copy(to_broker()).publish.routing_key, "nackguard.delay.q.1000ms");

  now += 999;  // declared 999 ms ago: still fresh
  client(nack(kCh, 2));
  std::vector<Wire> sent = to_broker();
  EXPECT_EQ(take_copy(sent).frames, sent.size());

  now += 1;  // a TTL since the declaration: declared again, which resets x-expires
  client(nack(kCh, 3));
  // The declaration waits for the copies in flight, which it could lose by closing the
  // proxy's channel (docs/reliability.md, "The consumer-kill fallback storm").
  EXPECT_TRUE(to_broker().empty());
  confirm(2, true);
  sent = to_broker();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(std::vector<Wire>(sent.begin(), sent.begin() + 2), frames({ack(kCh, 1), ack(kCh, 2)}));
  expect_delay_declare(std::vector<Wire>(sent.begin() + 2, sent.end()), 1000);
  broker(declare_ok("nackguard.delay.q.1000ms"));
  sent = to_broker();
  EXPECT_EQ(take_copy(sent).frames, sent.size());

  confirm(3);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 3)}));
}

TEST_F(GuardDelay, FastReturnsPastPerMessageAreDelayedUntilTheWindowEnds) {
  retry::Policy p = policy(10);
  p.rate.per_message = 1;  // window 10 s
  start(p);
  const Message m = message("m1");
  deliver_passes(delivery(1, m));
  client_passes(nack(kCh, 1));  // the first return in the window: immediate

  deliver_passes(delivery(2, m, true));
  now += 1000;
  client(nack(kCh, 2));  // the second within 10 s: delayed by the backoff of return 2
  expect_delay_declare(open_proxy_channel(), 2000);
  broker(declare_ok("nackguard.delay.q.2000ms"));
  Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(FieldValue::i64(2)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));

  // Back from the delay queue after the window: immediate again.
  retry_passes(delivery(3, copy.header.properties, amqp::as_chars(copy.body), false, "", "q"));
  now += 10000;
  client_passes(nack(kCh, 3));
  EXPECT_EQ(listener.requeues,
            (std::vector<Action>{Action::forward, Action::delay, Action::forward}));
  EXPECT_EQ(tracked("m1")->returns, 3u);
}

TEST_F(GuardDelay, PastTheLimitADelayedPolicyStillDeadLetters) {
  start(delayed(1));
  const Message m = message("m1", 1);  // came back from a delay queue once already
  retry_passes(delivery(1, m));
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.header_text("x-nackguard-reason"), text(FieldValue::string("max_redeliveries")));
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(FieldValue::i64(2)));
}

class GuardOutage : public GuardTest {
 protected:
  void SetUp() override {
    start(outage_policy(10, 10));
    // Copies of nackguard's (x-nackguard-returns 0, from an outage earlier), so that each keeps
    // its body for the copy an outage asks for: a first delivery made while the queue was
    // healthy keeps none, and its return in outage is forwarded (guard_body_test.cpp).
    for (std::uint64_t tag = 1; tag <= 20; ++tag) {
      retry_passes(delivery(tag, message("m" + std::to_string(tag), 0)));
    }
  }
};

TEST_F(GuardOutage, ReturnsPastTheRatioAreDelayedWithoutSpendingTheirBudget) {
  // 10 returns of 20 deliveries is a ratio of 0.5, not above it: all forwarded.
  for (std::uint64_t tag = 1; tag <= 10; ++tag) client_passes(nack(kCh, tag));
  EXPECT_TRUE(listener.outages.empty());

  // The 11th makes 0.55: an outage starts, reported once; this and later returns are delayed.
  for (std::uint64_t tag = 11; tag <= 15; ++tag) client(nack(kCh, tag));
  ASSERT_EQ(listener.outages.size(), 1u);
  EXPECT_EQ(listener.outages[0].queue, "q");
  EXPECT_TRUE(listener.outages[0].started);
  EXPECT_DOUBLE_EQ(listener.outages[0].ratio, 11.0 / 20.0);

  // One channel, one declaration, then the five copies pipelined.
  expect_delay_declare(open_proxy_channel(), 1000);
  broker(declare_ok("nackguard.delay.q.1000ms"));
  std::vector<Wire> sent = to_broker();
  std::size_t at = 0;
  for (std::uint64_t tag = 11; tag <= 15; ++tag) {
    Copy copy = take_copy(sent, at);
    at += copy.frames;
    EXPECT_EQ(copy.body, bytes_of(message("m" + std::to_string(tag)).body));
    EXPECT_EQ(copy.publish.routing_key, "nackguard.delay.q.1000ms");
    // Not counted: the outage is the queue's fault, not the message's.
    EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(FieldValue::i64(0)));
  }
  EXPECT_EQ(at, sent.size());
  confirm(5, true);
  EXPECT_EQ(to_broker(),
            frames({ack(kCh, 11), ack(kCh, 12), ack(kCh, 13), ack(kCh, 14), ack(kCh, 15)}));
  EXPECT_EQ(tracked("m11")->returns, 0u);
  EXPECT_EQ(tracked("m1")->returns, 1u);

  // A message counted before the outage keeps its count through it.
  deliver_passes(delivery(21, message("m1", 0), true));
  client(nack(kCh, 21));
  Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(FieldValue::i64(1)));
  confirm(6);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 21)}));
  EXPECT_EQ(tracked("m1")->returns, 1u);

  EXPECT_EQ(listener.outages.size(), 1u);
  std::vector<Action> expected(10, Action::forward);
  expected.insert(expected.end(), 6, Action::delay);
  EXPECT_EQ(listener.requeues, expected);
  EXPECT_TRUE(listener.dead_letters.empty());
}

TEST_F(GuardOutage, OutageEndsWhenTheWindowSlidesPast) {
  for (std::uint64_t tag = 1; tag <= 11; ++tag) client(nack(kCh, tag));
  ASSERT_EQ(listener.outages.size(), 1u);
  broker_bytes();
  // 10 s later the window holds nothing: the next delivery ends the outage, and its return
  // is forwarded.
  now += 10000;
  deliver_passes(delivery(21, message("m21")));
  ASSERT_EQ(listener.outages.size(), 2u);
  EXPECT_FALSE(listener.outages[1].started);
  client_passes(nack(kCh, 21));
  EXPECT_EQ(listener.requeues.back(), Action::forward);
}

// A copy sent during an outage carries x-nackguard-first-return. A message whose only
// returns came during the outage was never counted, so the tracker's first_return_ms is 0;
// the header must not claim the message first failed at the Unix epoch.
TEST_F(GuardOutage, CopyOfAMessageNeverCountedCarriesNoEpochFirstReturn) {
  for (std::uint64_t tag = 1; tag <= 10; ++tag) client_passes(nack(kCh, tag));
  client(nack(kCh, 11));
  expect_delay_declare(open_proxy_channel(), 1000);
  broker(declare_ok("nackguard.delay.q.1000ms"));
  Copy copy = take_copy(to_broker());
  const std::string first = copy.header_text("x-nackguard-first-return");
  EXPECT_TRUE(first == "absent" || first == text(FieldValue::timestamp(seconds(now))))
      << "m11 first returned at " << seconds(now) << " s, in the outage; the copy says " << first;
}

}  // namespace
}  // namespace nackguard::session::guard_test
