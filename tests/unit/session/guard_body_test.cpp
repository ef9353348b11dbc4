// Which deliveries keep their body (guard_delivery.cpp): a first delivery whose first return will
// be forwarded as the consumer sent it keeps none; every redelivery, and every first delivery
// whose first return may need a copy, keeps it. A return that needs the body it did not keep
// is forwarded, and the redelivery keeps it.

#include <gtest/gtest.h>
#include <xxhash.h>

#include "proxy/guard/identity.hpp"
#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using retry::Action;

class GuardBody : public GuardTest {
 protected:
  // Whether the unacked delivery the client knows as `tag` kept its body.
  bool kept(std::uint64_t tag) {
    const ChannelState* ch = conn->session.channel(kCh);
    const Delivery* d = ch ? ch->find_unacked(tag) : nullptr;
    EXPECT_NE(d, nullptr) << "no unacked delivery " << tag;
    return d && d->body && d->body->bytes.size() == d->body_size;
  }
  // The unacked delivery the client knows as `tag`.
  const Delivery& unacked(std::uint64_t tag) {
    static const Delivery none;
    const ChannelState* ch = conn->session.channel(kCh);
    const Delivery* d = ch ? ch->find_unacked(tag) : nullptr;
    EXPECT_NE(d, nullptr) << "no unacked delivery " << tag;
    return d ? *d : none;
  }
  // The delay copy the proxy publishes once its channel is open and the delay queue declared.
  Copy delayed_copy(std::int64_t ttl_ms) {
    open_proxy_channel();
    broker(declare_ok("nackguard.delay.q." + std::to_string(ttl_ms) + "ms"));
    return take_copy(to_broker());
  }
  // Under `p`, a first delivery keeps its body, and its first return publishes the copy that
  // `copy` takes, with that body.
  template <typename TakeCopy>
  void expect_first_body_kept_for_the_copy(const retry::Policy& p, TakeCopy copy) {
    start(p);
    const Message m = message("m1");
    deliver_passes(delivery(1, m));
    EXPECT_TRUE(kept(1));
    client(nack(kCh, 1));
    EXPECT_EQ(copy().body, bytes_of(m.body));
    EXPECT_TRUE(listener.fallbacks.empty());
  }
  // The dead-letter the proxy publishes once its channel is open and q.dlq checked.
  Copy dead_letter_copy() {
    EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
    broker(declare_ok("q.dlq"));
    return take_copy(to_broker());
  }
};

TEST_F(GuardBody, FirstDeliveriesUnderImmediateKeepNoBodyRedeliveriesDo) {
  retry::Policy p = policy(3);
  // A known broker limit: with none known, m4's x-delivery-count would have it republished
  // before the client sees it (outcome.hpp, kAssumedBrokerLimit).
  p.broker_delivery_limit = {retry::BrokerDeliveryLimit::Kind::none, 0};
  start(p);
  const Message with_headers = message("m1");  // a headers table without counts
  Message plain = message("m2");
  plain.properties = without_headers(plain.properties);
  deliver_passes(delivery(1, with_headers));
  deliver_passes(delivery(2, plain));
  EXPECT_FALSE(kept(1));
  EXPECT_FALSE(kept(2));
  deliver_passes(delivery(3, with_headers, true));
  retry_passes(delivery(4, message("m3", 0)));  // a copy of nackguard's
  deliver_passes(delivery(5, with_delivery_count(message("m4"), 1)));
  EXPECT_TRUE(kept(3));
  EXPECT_TRUE(kept(4));
  EXPECT_TRUE(kept(5));
}

// The first return is forwarded, the redelivery keeps its body (and its return goes back as a
// copy with its count), and the loop ends in the DLQ after exactly max_redeliveries + 1
// deliveries, with the body intact.
TEST_F(GuardBody, ASkippedBodyLoopStillEndsInTheDlqAfterMaxPlusOneDeliveries) {
  start(policy(3));
  Message m = message("poison");
  deliver_passes(delivery(1, m));
  EXPECT_FALSE(kept(1));
  client_passes(nack(kCh, 1));  // 1: the redelivered flag carries it
  deliver_passes(delivery(2, m, true));
  EXPECT_TRUE(kept(2));
  client(nack(kCh, 2));  // 2: a copy carries it
  const Copy second = take_copy(open_proxy_channel());
  EXPECT_EQ(second.publish.routing_key, "q");
  EXPECT_EQ(second.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  m = delivered(m, second);
  retry_passes(delivery(3, m));
  EXPECT_TRUE(kept(3));
  client_passes(nack(kCh, 3));  // 3: the copy's flag
  deliver_passes(delivery(4, m, true));
  client(nack(kCh, 4));  // the 4th return
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  const Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.body, bytes_of(m.body));
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(4)));
  confirm(2);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 4)}));
  EXPECT_EQ(
      listener.dead_letters,
      (std::vector<Dl>{{"q", "message_id:poison", 4, retry::DeadLetterReason::max_redeliveries}}));
  EXPECT_EQ(listener.requeues, (std::vector<Action>{Action::forward, Action::republish,
                                                    Action::forward, Action::dead_letter}));
  EXPECT_TRUE(listener.fallbacks.empty());
}

TEST_F(GuardBody, RequeueDelayedKeepsTheFirstBody) {
  retry::Policy p = policy(3);
  p.requeue = retry::RequeueMode::delayed;
  expect_first_body_kept_for_the_copy(p, [&] { return delayed_copy(1000); });
}

TEST_F(GuardBody, MaxRedeliveriesZeroKeepsTheFirstBody) {
  expect_first_body_kept_for_the_copy(policy(0), [&] { return dead_letter_copy(); });
}

// Dead-lettering with basic.reject publishes nothing: no body is needed.
TEST_F(GuardBody, MaxRedeliveriesZeroDeadLetteredByRejectKeepsNone) {
  retry::Policy p = policy(0);
  p.dead_letter.via = retry::DeadLetter::Via::reject;
  start(p);
  deliver_passes(delivery(1, message("m1")));
  EXPECT_FALSE(kept(1));
  client(nack(kCh, 1));
  EXPECT_EQ(to_broker(), frames({reject(kCh, 1, false)}));
  EXPECT_EQ(listener.dead_letters.size(), 1u);
}

// per_message 1: the first return passes, the second is delayed; the redelivery keeps the body
// for it.
TEST_F(GuardBody, PerMessageOneForwardsTheFirstReturnAndDelaysTheSecondWithItsBody) {
  retry::Policy p = policy(10);
  p.rate.per_message = 1;
  start(p);
  const Message m = message("m1");
  deliver_passes(delivery(1, m));
  EXPECT_FALSE(kept(1));
  client_passes(nack(kCh, 1));
  deliver_passes(delivery(2, m, true));
  EXPECT_TRUE(kept(2));
  client(nack(kCh, 2));
  EXPECT_EQ(delayed_copy(2000).body, bytes_of(m.body));
  EXPECT_EQ(listener.requeues, std::vector<Action>{Action::forward});  // the delay not confirmed
  EXPECT_TRUE(listener.fallbacks.empty());
}

// per_message 0 (no policy file can say it; the rule follows decide_return all the same).
TEST_F(GuardBody, PerMessageZeroKeepsTheFirstBody) {
  retry::Policy p = policy(10);
  p.rate.per_message = 0;
  expect_first_body_kept_for_the_copy(p, [&] { return delayed_copy(1000); });
}

// Deliveries made while the queue was healthy, returned once it is in outage: forwarded as
// before the outage (no count spent, no fallback: nothing failed); a delivery made in outage
// keeps its body and is delayed, and so is the redelivery of one forwarded.
TEST_F(GuardBody, OutageStartedAfterTheDeliveryForwardsItsFirstReturnAndKeepsLaterBodies) {
  start(outage_policy(10, 3));
  for (std::uint64_t tag = 1; tag <= 3; ++tag) {
    deliver_passes(delivery(tag, message("m" + std::to_string(tag))));
    EXPECT_FALSE(kept(tag));
  }
  client_passes(nack(kCh, 1));  // 1 of 3 returned
  client_passes(nack(kCh, 2));  // 2 of 3: an outage, which would delay it
  ASSERT_EQ(listener.outages.size(), 1u);
  EXPECT_TRUE(listener.outages[0].started);
  EXPECT_EQ(tracked("m2")->returns, 0u);  // an outage's return is not counted
  EXPECT_EQ(listener.requeues, (std::vector<Action>{Action::forward, Action::forward}));

  const Message m2 = message("m2");
  deliver_passes(delivery(4, m2, true));
  deliver_passes(delivery(5, message("m5")));
  EXPECT_TRUE(kept(4));
  EXPECT_TRUE(kept(5));
  client(nack(kCh, 4));
  EXPECT_EQ(delayed_copy(1000).body, bytes_of(m2.body));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 4)}));
  EXPECT_EQ(listener.requeues,
            (std::vector<Action>{Action::forward, Action::forward, Action::delay}));
  EXPECT_TRUE(listener.fallbacks.empty());
}

// More of the window's messages returned than the share at which an outage ends: an outage may
// start before the next return, though fewer than min_messages were seen.
TEST_F(GuardBody, AQueueNearAnOutageKeepsFirstBodies) {
  retry::Policy p = policy(10);
  p.rate.min_messages = 1000;
  p.rate.outage_ratio = 0.5;
  start(p);
  deliver_passes(delivery(1, message("m1")));
  EXPECT_FALSE(kept(1));
  client_passes(nack(kCh, 1));
  deliver_passes(delivery(2, message("m2")));  // 1 of 2 returned: 0.5 > 0.8 * 0.5
  EXPECT_TRUE(kept(2));
  client_passes(ack(kCh, 2));
  deliver_passes(delivery(3, message("m3")));  // 1 of 3: 0.33, not above 0.4
  EXPECT_FALSE(kept(3));
}

// A first delivery's crash is carried by the broker's redelivered flag; the redelivery keeps
// its body, so the crash loop of a message delivered without one ends in the DLQ with its body.
TEST_F(GuardBody, CrashLoopOfAFirstDeliveryWithoutBodyIsDeadLetteredWithItsBody) {
  start(policy(1));
  const Message poison = message("m1");
  deliver_passes(delivery(1, poison));
  EXPECT_FALSE(kept(1));
  client_eof();
  now += 1000;
  connect();
  deliver_passes(delivery(1, poison, true));  // a suspect, alone
  EXPECT_TRUE(kept(1));
  // 2 crashes of 1 allowed: dead-lettered at the crash, with the body kept.
  const Copy copy = client_eof_with_copy(1, "q.dlq");
  EXPECT_EQ(copy.body, bytes_of(poison.body));
  EXPECT_EQ(copy.header_text("x-nackguard-reason"), text(amqp::FieldValue::string("crash_loop")));
  EXPECT_TRUE(listener.fallbacks.empty());
}

// A broker limit of 0 (the policy's broker_delivery_limit) leaves the first return no
// room: it is republished into the queue, which needs the body.
TEST_F(GuardBody, ABrokerLimitOfZeroKeepsTheFirstBody) {
  retry::Policy p = policy(10);
  p.broker_delivery_limit = {retry::BrokerDeliveryLimit::Kind::fixed, 0};
  start(p);
  const Message m = message("m1");
  deliver_passes(delivery(1, m));
  EXPECT_TRUE(kept(1));
  client(nack(kCh, 1));
  const Copy copy = take_copy(open_proxy_channel());
  EXPECT_EQ(copy.publish.routing_key, "q");
  EXPECT_EQ(copy.body, bytes_of(m.body));
}

// The policy changed between the delivery and its return: the return the new one delays is
// forwarded (counted, no fallback), and the redelivery keeps its body for the next.
TEST_F(GuardBody, PolicyReloadBeforeTheReturnForwardsItAndTheRedeliveryKeepsTheBody) {
  start(policy(10));
  const Message m = message("m1");
  deliver_passes(delivery(1, m));
  EXPECT_FALSE(kept(1));
  retry::Policy delayed = policy(10);
  delayed.requeue = retry::RequeueMode::delayed;
  context->set_policies(
      std::make_shared<const retry::PolicySet>(std::vector<retry::Policy>{delayed}));
  client_passes(nack(kCh, 1));
  EXPECT_TRUE(listener.fallbacks.empty());
  EXPECT_EQ(tracked("m1")->returns, 1u);
  deliver_passes(delivery(2, m, true));
  EXPECT_TRUE(kept(2));
  client(nack(kCh, 2));
  const Copy copy = delayed_copy(2000);
  EXPECT_EQ(copy.body, bytes_of(m.body));
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
}

// The queue's limit of 1 is learnt only after the delivery: its first return, which the broker
// may end with one return the consumer never sees, cannot be republished without the body (a
// limit of 0 likewise; QueueFactsRegistry's test). A fallback says so, and what to do.
TEST_F(GuardBody, ALimitOfOneLearntAfterTheDeliveryFallsBackAndSaysWhy) {
  start(policy(10));
  deliver_passes(delivery(1, message("m1")));
  EXPECT_FALSE(kept(1));
  amqp::QueueDeclare declare = durable_declare(kQueue);
  declare.arguments.set("x-queue-type", amqp::FieldValue::string("quorum"));
  declare.arguments.set("x-delivery-limit", amqp::FieldValue::i64(1));
  client_passes(method(kCh, declare));
  deliver_passes(method(kCh, amqp::QueueDeclareOk{kQueue, 0, 0}));
  deliver_passes(delivery(2, message("m2")));  // nothing returned yet: no outage near
  EXPECT_TRUE(kept(2));
  client_passes(nack(kCh, 1));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_TRUE(listener.fallbacks[0].at_broker_limit);
  EXPECT_NE(
      listener.fallbacks[0].detail.find("set broker_delivery_limit to it in the queue's policy"),
      std::string::npos)
      << listener.fallbacks[0].detail;
}

// Hashing a large body as it passes costs more than the copy it replaces, so a first delivery
// that keeps no body is hashed only when its identity may fall back to the body; below 4 KiB
// it is hashed anyway (cheaper than decoding its properties to decide).
TEST_F(GuardBody, ASkippedLargeBodyIsHashedOnlyWhenItsIdentityMayNeedIt) {
  retry::Policy p = policy(3);
  p.identity = retry::Policy{}.identity;  // message_id, header id, correlation_id, body
  start(p);
  Message named = message("m1");
  named.body = std::string(8192, 'a');
  Message anonymous = message("m2");
  anonymous.body = std::string(8192, 'b');
  anonymous.properties.message_id.reset();
  anonymous.properties.correlation_id.reset();
  const Message small = message("m3");
  deliver_passes(delivery(1, named));
  deliver_passes(delivery(2, anonymous));
  deliver_passes(delivery(3, small));
  for (std::uint64_t tag : {1, 2, 3}) EXPECT_FALSE(kept(tag)) << tag;
  EXPECT_FALSE(unacked(1).body_hash.known());
  EXPECT_TRUE(unacked(2).body_hash.known());
  EXPECT_EQ(std::uint64_t{unacked(2).body_hash},
            XXH3_64bits(anonymous.body.data(), anonymous.body.size()));
  EXPECT_TRUE(unacked(3).body_hash.known());
  EXPECT_EQ(std::uint64_t{unacked(3).body_hash}, XXH3_64bits(small.body.data(), small.body.size()));
  // Each return counts under its identity: message_id for m1, the body's hash for m2.
  client_passes(nack(kCh, 1));
  client_passes(nack(kCh, 2));
  EXPECT_EQ(tracked("m1")->returns, 1u);
  EXPECT_EQ(context->tracker().stats().entries, 2u);
}

// An unknown hash is no identity: after a reload to `identity: [body]` the return of a delivery
// whose body was not hashed is forwarded uncounted, never counted under a hash all such
// deliveries would share; its redelivery keeps its body and counts.
TEST_F(GuardBody, AnUnknownBodyHashIsNoIdentityAfterAReloadToBodyIdentity) {
  start(policy(3));
  Message m1 = message("m1");
  m1.body = std::string(8192, 'a');
  Message m2 = message("m2");
  m2.body = std::string(8192, 'b');
  deliver_passes(delivery(1, m1));
  deliver_passes(delivery(2, m2));
  ASSERT_FALSE(unacked(1).body_hash.known());
  retry::Policy by_body = policy(3);
  by_body.identity = {{retry::IdentitySource::Kind::body, ""}};
  context->set_policies(
      std::make_shared<const retry::PolicySet>(std::vector<retry::Policy>{by_body}));
  EXPECT_EQ(message_identity(by_body.identity, m1.properties, unacked(1)), std::nullopt);
  client_passes(nack(kCh, 1));
  client_passes(nack(kCh, 2));
  EXPECT_EQ(context->tracker().stats().entries, 0u);
  deliver_passes(delivery(3, m1, true));
  EXPECT_TRUE(kept(3));
  client(nack(kCh, 3));  // counted: 2, past what its flag carries, so a copy with its count
  EXPECT_EQ(context->tracker().stats().entries, 1u);
  EXPECT_EQ(take_copy(open_proxy_channel()).header_text("x-nackguard-returns"),
            text(amqp::FieldValue::i64(2)));
}

}  // namespace
}  // namespace nackguard::session::guard_test
