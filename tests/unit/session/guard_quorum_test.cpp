// Quorum queues through a real Session and Guard: the broker's x-delivery-count never makes an
// innocent message look like a poison, and the broker's own delivery limit never ends a message
// (it would drop it without a dead-letter exchange).

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using retry::DeadLetterReason;

class GuardQuorum : public GuardTest {
 protected:
  // The client declares queue "q" as a quorum queue with these extra arguments; the broker's
  // declare-ok answers it.
  void declare_quorum(std::optional<std::int64_t> delivery_limit) {
    amqp::QueueDeclare declare;
    declare.queue = kQueue;
    declare.durable = true;
    declare.arguments.set("x-queue-type", amqp::FieldValue::string("quorum"));
    if (delivery_limit) {
      declare.arguments.set("x-delivery-limit", amqp::FieldValue::i64(*delivery_limit));
    }
    client_passes(method(kCh, declare));
    deliver_passes(method(kCh, amqp::QueueDeclareOk{kQueue, 0, 0}));
  }
  // A quorum queue's only message, dead-lettered at its first return (under `p`) while q.dlq
  // does not exist yet: the declaration of q.dlq that follows the passive one's 404.
  std::vector<Wire> dlq_declared_after_a_dead_letter(const retry::Policy& p = policy(0)) {
    start(p);
    declare_quorum(std::nullopt);
    deliver_passes(delivery(1, message("m1")));
    client(nack(kCh, 1));
    EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
    broker(channel_close(404, "NOT_FOUND - no queue 'q.dlq' in vhost '/'", 50, 10));
    return reopen_proxy_channel();
  }
  // Under policy(5) with delayed requeues (the client declaring q a quorum queue first if
  // `declared_quorum`), the broker delivers `first` as broker tag 1 and the client nacks it:
  // returns what the proxy's channel opens with, the delay queue's declaration.
  std::vector<Wire> delay_declared_after_a_nack(bool declared_quorum, const Bytes& first) {
    retry::Policy p = policy(5);
    p.requeue = retry::RequeueMode::delayed;
    start(p);
    if (declared_quorum) declare_quorum(std::nullopt);
    deliver_passes(first);
    client(nack(kCh, 1));
    return open_proxy_channel();
  }
  // The proxy's channel opens and a copy is published without a declaration; returns it.
  Copy republished() { return only_copy(open_proxy_channel()); }
};

TEST_F(GuardQuorum, WithoutARecordTheBrokersCountIsNotTaken) {
  // Another replica (or a restart) lost nackguard's record; x-delivery-count 3 counts returns
  // that may have been no fault of the message. Its redelivered flag counts one.
  retry::Policy p = policy(3);
  p.broker_delivery_limit.kind = retry::BrokerDeliveryLimit::Kind::none;
  start(p);
  const Message m = with_delivery_count(message("m1"), 3);
  deliver_passes(delivery(1, m, true));
  client(nack(kCh, 1));
  Copy copy = republished();
  EXPECT_EQ(copy.publish.routing_key, "q");
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  EXPECT_TRUE(listener.dead_letters.empty());
}

TEST_F(GuardQuorum, ADeliveryAtTheBrokersLimitIsRepublishedBeforeTheConsumerSeesIt) {
  start(policy(30));
  // No limit is known (a RabbitMQ policy may set one no frame shows): assumed the tightest
  // (retry::kAssumedBrokerLimit). At x-delivery-count 20 one more return of any kind, a crash
  // too, could have the broker drop it (4.0's default limit, no dead-letter exchange).
  const Message m = with_delivery_count(message("m1"), 20);
  broker(delivery(1, m, true));
  EXPECT_TRUE(client_bytes().empty());
  Copy copy = republished();
  EXPECT_EQ(copy.publish.exchange, "");
  EXPECT_EQ(copy.publish.routing_key, "q");  // the tail of its own queue: a fresh broker count
  // Its count: the one return its redelivered flag stands for. The broker's 20 is not its count.
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
  EXPECT_EQ(copy.header_text("x-original-exchange"), text(amqp::FieldValue::string("ex")));
  EXPECT_EQ(copy.header_text("x-nackguard-reason"), "absent");
  // The broker's count is the original's: on the copy it would be stale (and read as a count).
  EXPECT_EQ(copy.header_text("x-delivery-count"), "absent");
  EXPECT_EQ(copy.body, bytes_of(m.body));
  EXPECT_TRUE(to_broker().empty());  // the original is acked only after the confirm
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::republish});
  EXPECT_TRUE(listener.dead_letters.empty());

  // The copy comes back with nackguard's count and none of the broker's: it is handed out.
  broker(delivery(2, delivered(m, copy)));
  std::vector<Wire> got = to_client();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(as<amqp::BasicDeliver>(got[0]).delivery_tag, 1u);  // the client saw no gap
  EXPECT_EQ(got[2].payload, bytes_of(m.body));
}

TEST_F(GuardQuorum, UnderAKnownLimitTheDeliveryBeforeItIsRepublishedToo) {
  retry::Policy p = policy(30);
  p.broker_delivery_limit = {retry::BrokerDeliveryLimit::Kind::fixed, 20};
  start(p);
  // x-delivery-count 18: a requeue makes it 19, and a return the consumer never sees (a
  // requeue that crosses its basic.cancel) 20, within the limit: handed out.
  deliver_passes(delivery(1, with_delivery_count(message("m1"), 18), true));
  // 19: the requeue would make it 20 and the unseen return 21, and RabbitMQ 4.0.5 drops it
  // (test_redelivery's test_i lost its poison so): republished before the consumer sees it.
  broker(delivery(2, with_delivery_count(message("m2"), 19), true));
  EXPECT_TRUE(client_bytes().empty());
  Copy copy = republished();
  EXPECT_EQ(copy.publish.routing_key, "q");
  EXPECT_EQ(copy.header_text("x-delivery-count"), "absent");
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  EXPECT_EQ(listener.requeues, (std::vector<retry::Action>{retry::Action::republish}));
}

TEST_F(GuardQuorum, ARefusedRepublishFallsBackAndSaysTheBrokersLimitMayEndIt) {
  broker_version = "4.0.5";
  start(policy(30));
  broker(delivery(1, with_delivery_count(message("m1"), 20), true));
  republished();
  refuse(1);
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1)}));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_TRUE(listener.fallbacks[0].at_broker_limit);
  EXPECT_EQ(listener.fallbacks[0].cause, retry::FallbackCause::republish_failed);
}

TEST_F(GuardQuorum, PolicyKeyNoneLetsEveryDeliveryThrough) {
  retry::Policy p = policy(30);
  p.broker_delivery_limit.kind = retry::BrokerDeliveryLimit::Kind::none;
  start(p);
  deliver_passes(delivery(1, with_delivery_count(message("m1"), 20), true));
  // Its return: the second (its redelivered flag carries one), so a copy with its count.
  client(nack(kCh, 1));
  EXPECT_EQ(republished().header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  EXPECT_TRUE(listener.fallbacks.empty());
}

TEST_F(GuardQuorum, ARequeueThatWouldPassALimitDeclaredAfterTheDeliveryIsRepublished) {
  start(policy(30));
  const Message m = message("m1", 0);  // a copy of nackguard's: its body is kept
  retry_passes(delivery(1, m));
  // A limit of 1, tighter than the one assumed, learnt only now from the client's declaration:
  // the requeue and one return the consumer never sees would pass it.
  declare_quorum(1);
  client(nack(kCh, 1));
  Copy copy = republished();
  EXPECT_EQ(copy.publish.routing_key, "q");
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));  // the nack never reached the broker
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::republish});
}

TEST_F(GuardQuorum, UnderTheAssumedLimitEveryCountingRedeliveryIsACopyAndTheCountHolds) {
  // No limit known: any delivery with an x-delivery-count goes back as a copy before the
  // consumer sees it, carrying the count. A poison is still delivered max + 1 times.
  start(policy(3));
  Message m = message("m1");
  std::uint64_t tag = 1, seq = 0;
  int handed_out = 0;
  bool redelivered = false;
  std::int64_t broker_count = 0;
  // A copy of m was published: the broker confirms it, the proxy acks the original, and the
  // copy is the message from now on, not redelivered, not counted by the broker.
  auto copied = [&](const Copy& copy) {
    confirm(++seq);
    EXPECT_EQ(to_broker(), frames({ack(kCh, tag)}));
    m = delivered(m, copy);
    redelivered = false;
    broker_count = 0;
  };
  while (listener.dead_letters.empty() && tag < 40) {
    const Message as_sent = broker_count > 0 ? with_delivery_count(m, broker_count) : m;
    broker(delivery(tag, as_sent, redelivered));
    std::vector<Wire> got = to_client();
    if (got.empty()) {  // republished at the delivery
      const Copy copy = take_copy(past_proxy_channel_open(to_broker()));
      EXPECT_EQ(copy.publish.routing_key, "q");
      copied(copy);
      ++tag;
      continue;
    }
    ++handed_out;
    const std::uint64_t client_tag = as<amqp::BasicDeliver>(got[0]).delivery_tag;
    client(nack(kCh, client_tag));
    std::vector<Wire> sent = to_broker();
    if (sent.size() == 1 && sent[0].is(mid::basic_nack)) {  // forwarded
      redelivered = true;
      ++broker_count;
    } else {
      sent = past_proxy_channel_open(sent);
      if (!sent.empty() && sent[0].is(mid::queue_declare)) {
        broker(declare_ok("q.dlq"));
        sent = to_broker();
      }
      copied(take_copy(sent));
    }
    ++tag;
  }
  EXPECT_EQ(handed_out, 4);
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].returns, 4u);
  EXPECT_EQ(listener.dead_letters[0].reason, DeadLetterReason::max_redeliveries);
}

TEST_F(GuardQuorum, ALimitLearntAtTheReturnAndPolicyReachedDeadLettersAsBrokerDeliveryLimit) {
  start(policy(3));
  const Message m = message("m1", 3);  // a copy carrying 3 returns
  retry_passes(delivery(1, m));
  declare_quorum(1);
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  Copy dead = take_copy(to_broker());
  EXPECT_EQ(dead.header_text("x-nackguard-reason"),
            text(amqp::FieldValue::string("broker_delivery_limit")));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:m1", 4, DeadLetterReason::broker_delivery_limit}}));
}

TEST_F(GuardQuorum, AHeldDeliveryAtTheLimitIsRepublishedInsteadOfWaiting) {
  retry::Policy p = policy(30);
  p.broker_delivery_limit = {retry::BrokerDeliveryLimit::Kind::fixed, 20};
  start(p);
  const Message suspect = message("s"), other = message("o");
  deliver_passes(delivery(1, suspect));
  client_eof();
  connect();
  broker(delivery(1, with_delivery_count(suspect, 1), true));
  EXPECT_EQ(to_client().size(), 3u);  // the suspect, alone
  // Behind it a delivery at the broker's limit: held back, a crash would have the broker drop it.
  broker(delivery(2, with_delivery_count(other, 20), true));
  EXPECT_TRUE(client_bytes().empty());
  Copy copy = republished();
  EXPECT_EQ(copy.publish.routing_key, "q");
  EXPECT_EQ(copy.body, bytes_of(other.body));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
}

TEST_F(GuardQuorum, WhileItsDlqIsRefusedAMessageAtTheLimitIsStillRepublished) {
  broker_version = "4.0.5";
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(channel_close(403, "ACCESS_REFUSED - configure access to queue 'q.dlq' refused", 50, 10));
  // The copy failed: the consumer's own nack goes to the broker, and copies for "q" fall back
  // for a while.
  EXPECT_EQ(reopen_proxy_channel(), frames({nack(kCh, 1)}));
  EXPECT_EQ(listener.fallbacks.size(), 1u);
  ASSERT_TRUE(context->copies_failing(kQueue, now));
  // A delivery at the broker's limit: forwarding a return of it, as a fallback does, would have
  // the broker drop it. Its republish needs no declaration, so it is still made.
  broker(delivery(2, with_delivery_count(message("m2"), 20), true));
  EXPECT_TRUE(client_bytes().empty());
  std::vector<Wire> sent = to_broker();
  Copy copy = take_copy(sent);
  EXPECT_EQ(copy.frames, sent.size());
  EXPECT_EQ(copy.publish.routing_key, "q");
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
}

TEST_F(GuardQuorum, QuorumSourceGetsQuorumDelayQueuesThatDeadLetterAtLeastOnce) {
  amqp::FieldTable args;
  args.set("x-queue-type", amqp::FieldValue::string("quorum"));
  args.set("x-message-ttl", amqp::FieldValue::i64(1000));
  args.set("x-dead-letter-exchange", amqp::FieldValue::string(""));
  args.set("x-dead-letter-routing-key", amqp::FieldValue::string(kQueue));
  args.set("x-dead-letter-strategy", amqp::FieldValue::string("at-least-once"));
  args.set("x-overflow", amqp::FieldValue::string("reject-publish"));
  // No x-expires: a quorum queue's counts from its declaration, renewed by nothing nackguard
  // does, and would delete the copies waiting in it.
  EXPECT_EQ(delay_declared_after_a_nack(true, delivery(1, message("m1"))),
            frames({method(kProxyChannel, durable_declare("nackguard.delay.q.1000ms", args))}));
}

TEST_F(GuardQuorum, ThreeDotXMarksAQuorumQueuesFirstDeliveryWhichTellsItsType) {
  // RabbitMQ 3.x sets x-delivery-count 0 on a quorum queue's basic.get-ok: a queue declared
  // elsewhere is then known as quorum before its first return.
  const std::vector<Wire> sent =
      delay_declared_after_a_nack(false, delivery(1, with_delivery_count(message("m1"), 0)));
  ASSERT_EQ(sent.size(), 1u);
  const amqp::QueueDeclare declare = as<amqp::QueueDeclare>(sent[0]);
  EXPECT_EQ(declare.queue, "nackguard.delay.q.1000ms");
  EXPECT_EQ(text(declare.arguments.find("x-queue-type")), text(amqp::FieldValue::string("quorum")));
}

// RabbitMQ 4.3 counts no nack in x-delivery-count, and sets x-acquired-count on every
// redelivery of a quorum queue's message: that tells the type too (issue 38: a 4.3 nack loop
// got a classic DLQ).
TEST_F(GuardQuorum, FourDotThreesAcquiredCountTellsAQuorumQueue) {
  const std::vector<Wire> sent = delay_declared_after_a_nack(
      false, delivery(1, with_count(message("m1"), "x-acquired-count", 1), true));
  ASSERT_EQ(sent.size(), 1u);
  const amqp::QueueDeclare declare = as<amqp::QueueDeclare>(sent[0]);
  EXPECT_EQ(text(declare.arguments.find("x-queue-type")), text(amqp::FieldValue::string("quorum")));
}

// A quorum queue redelivers, and counts, a delivery that crossed its consumer's
// basic.cancel, which no consumer returned: its copies are exact (x-nackguard-exact), every
// return of one is written into a copy, and their redelivered flag counts nothing.
TEST_F(GuardQuorum, CopiesFromAQuorumQueueAreExact) {
  retry::Policy p = policy(5);
  p.broker_delivery_limit.kind = retry::BrokerDeliveryLimit::Kind::none;
  start(p);
  declare_quorum(std::nullopt);
  deliver_passes(delivery(1, message("m1")));
  client_passes(nack(kCh, 1));  // an original's first return: its flag carries it
  deliver_passes(delivery(2, with_delivery_count(message("m1"), 1), true));
  client(nack(kCh, 2));
  const Copy first = republished();
  EXPECT_EQ(first.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  EXPECT_EQ(first.header_text("x-nackguard-exact"), text(amqp::FieldValue::boolean(true)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  // The copy's first return is written into a copy too.
  retry_passes(delivery(3, delivered(message("m1"), first)));
  client(nack(kCh, 3));
  const Copy second = take_copy(to_broker());
  EXPECT_EQ(second.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(3)));
  confirm(2);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 3)}));
  // Redelivered with no return seen (it crossed a basic.cancel): still 3; nacked, 4.
  const Message back = with_delivery_count(delivered(message("m1"), second), 1);
  deliver_passes(delivery(4, back, true));
  client(nack(kCh, 4));
  EXPECT_EQ(take_copy(to_broker()).header_text("x-nackguard-returns"),
            text(amqp::FieldValue::i64(4)));
}

// A classic queue redelivers only what a consumer returned: its copies are not exact.
TEST_F(GuardQuorum, CopiesFromAClassicQueueAreNotExact) {
  start(policy(5));
  deliver_passes(delivery(1, message("m1"), true));
  client(nack(kCh, 1));
  const Copy copy = republished();
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  EXPECT_EQ(copy.header_text("x-nackguard-exact"), "absent");
}

TEST_F(GuardQuorum, QuorumSourceGetsAQuorumDlq) {
  amqp::FieldTable args;
  args.set("x-queue-type", amqp::FieldValue::string("quorum"));
  EXPECT_EQ(dlq_declared_after_a_dead_letter(),
            frames({method(kProxyChannel, durable_declare("q.dlq", args))}));
}

// 4.x's default delivery limit (20) would drop a message from a DLQ that replay --dry-run
// or --where looked at 21 times (measured on 4.0.5): the DLQ is declared without a limit.
// On 3.x, -1 would drop a message at its first return (measured on 3.10.8): left out.
TEST_F(GuardQuorum, OnFourDotXTheQuorumDlqHasNoDeliveryLimit) {
  broker_version = "4.0.5";
  amqp::FieldTable args;
  args.set("x-queue-type", amqp::FieldValue::string("quorum"));
  args.set("x-delivery-limit", amqp::FieldValue::i64(-1));
  EXPECT_EQ(dlq_declared_after_a_dead_letter(),
            frames({method(kProxyChannel, durable_declare("q.dlq", args))}));
}

TEST_F(GuardQuorum, PolicyQueueTypeOverridesTheSource) {
  retry::Policy p = policy(0);
  p.queue_type = retry::QueueType::classic;
  EXPECT_EQ(dlq_declared_after_a_dead_letter(p),
            frames({method(kProxyChannel, durable_declare("q.dlq"))}));
}

}  // namespace
}  // namespace nackguard::session::guard_test
