// Quorum queues through a real Session and Guard: the broker's x-delivery-count never makes an
// innocent message look like a poison, and the broker's own delivery limit never ends a message
// (it would drop it without a dead-letter exchange).

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using retry::DeadLetterReason;
using Dl = RecordingListener::DeadLettered;

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
  // A quorum queue's only message, dead-lettered at its first return while q.dlq does not
  // exist yet: the declaration of q.dlq that follows the passive one's 404.
  std::vector<Wire> dlq_declared_after_a_dead_letter() {
    start(policy(0));
    declare_quorum(std::nullopt);
    deliver_passes(delivery(1, message("m1")));
    client(nack(1));
    EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
    broker(channel_close(404, "NOT_FOUND - no queue 'q.dlq' in vhost '/'", 50, 10));
    return reopen_proxy_channel();
  }
  // The proxy's channel opens and a copy is published without a declaration; returns it.
  Copy republished() {
    std::vector<Wire> sent = open_proxy_channel();
    Copy copy = take_copy(sent);
    EXPECT_EQ(copy.frames, sent.size());
    return copy;
  }
};

TEST_F(GuardQuorum, InnocentPrefetchedWithACrashingPoisonIsNeverDeadLettered) {
  start(policy(3));
  const Message poison = message("poison"), innocent = message("innocent");
  deliver_passes(delivery(1, poison));
  deliver_passes(delivery(2, innocent));
  client_eof();  // both counted once: nackguard cannot tell which one killed the consumer
  int poison_handed_out = 1;
  // Three more crashes, each with the poison handed out alone and the innocent message waiting
  // in the proxy. The broker counts every crash return of both in x-delivery-count.
  for (std::int64_t count = 1; count <= 3; ++count) {
    now += 1000;
    connect();
    broker(delivery(1, with_delivery_count(poison, count), true));
    broker(delivery(2, with_delivery_count(innocent, count), true));
    EXPECT_EQ(to_client(), decode_frames(delivery(1, with_delivery_count(poison, count), true)));
    ++poison_handed_out;
    client_eof();
  }
  EXPECT_EQ(poison_handed_out, 4);  // max_redeliveries + 1
  EXPECT_EQ(tracked("innocent")->returns, 1u);

  now += 1000;
  connect();
  broker(delivery(1, with_delivery_count(poison, 4), true));
  EXPECT_TRUE(client_bytes().empty());  // dead-lettered, never handed out again
  const Bytes innocent_again = delivery(2, with_delivery_count(innocent, 4), true);
  broker(innocent_again);
  // x-delivery-count 4 is past max_redeliveries 3, but three of those returns happened while
  // it waited inside the proxy: its own count is 1, and it is handed out.
  std::vector<Wire> got = to_client();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(as<amqp::BasicDeliver>(got[0]).delivery_tag, 1u);  // renumbered past the gap
  EXPECT_EQ(got[2].payload, bytes_of(innocent.body));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  Copy dead = take_copy(to_broker());
  EXPECT_EQ(dead.header_text("x-nackguard-reason"), text(amqp::FieldValue::string("crash_loop")));
  EXPECT_EQ(dead.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(4)));
  EXPECT_EQ(dead.header_text("x-delivery-count"), "absent");
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(1)}));
  client(ack(1));
  EXPECT_EQ(to_broker(), frames({ack(2)}));
  EXPECT_FALSE(tracked("innocent"));
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:poison", 4, DeadLetterReason::crash_loop}}));
}

TEST_F(GuardQuorum, WithoutARecordTheBrokersCountIsTaken) {
  // Another replica (or a restart) lost nackguard's record: x-delivery-count is all there is.
  start(policy(3));
  const Message m = with_delivery_count(message("m1"), 3);
  deliver_passes(delivery(1, m, true));
  client(nack(1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{});
}

TEST_F(GuardQuorum, OnFourDotZeroADeliveryAtTheDefaultLimitIsRepublishedBeforeTheConsumerSeesIt) {
  broker_version = "4.0.5";
  start(policy(30));
  // The 21st delivery: one more return of any kind, a crash too, and RabbitMQ 4.0 drops it
  // (limit 20, no dead-letter exchange).
  const Message m = with_delivery_count(message("m1"), 20);
  broker(delivery(1, m, true));
  EXPECT_TRUE(client_bytes().empty());
  Copy copy = republished();
  EXPECT_EQ(copy.publish.exchange, "");
  EXPECT_EQ(copy.publish.routing_key, "q");  // the tail of its own queue: a fresh broker count
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(20)));
  EXPECT_EQ(copy.header_text("x-original-exchange"), text(amqp::FieldValue::string("ex")));
  EXPECT_EQ(copy.header_text("x-nackguard-reason"), "absent");
  // The broker's count is the original's: on the copy it would be stale (and read as a count).
  EXPECT_EQ(copy.header_text("x-delivery-count"), "absent");
  EXPECT_EQ(copy.body, bytes_of(m.body));
  EXPECT_TRUE(to_broker().empty());  // the original is acked only after the confirm
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(1)}));
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::republish});
  EXPECT_TRUE(listener.dead_letters.empty());

  // The copy comes back with nackguard's count and none of the broker's: it is handed out.
  Message back = message("m1", 20);
  back.properties.headers->set("x-original-exchange", amqp::FieldValue::string("ex"));
  broker(delivery(2, back, false));
  std::vector<Wire> got = to_client();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(as<amqp::BasicDeliver>(got[0]).delivery_tag, 1u);  // the client saw no gap
  EXPECT_EQ(got[2].payload, bytes_of(m.body));
}

TEST_F(GuardQuorum, OnFourDotZeroTheDeliveryBeforeTheLimitIsRepublishedToo) {
  broker_version = "4.0.5";
  start(policy(30));
  // x-delivery-count 18: the consumer's requeue makes it 19, and a return the consumer never
  // sees (a requeue that crosses its basic.cancel) 20, within the limit: handed out.
  deliver_passes(delivery(1, with_delivery_count(message("m1"), 18), true));
  client_passes(nack(1));
  // 19: the requeue would make it 20 and the unseen return 21, and RabbitMQ 4.0.5 drops it
  // (test_redelivery's test_i lost its poison so): republished before the consumer sees it.
  broker(delivery(2, with_delivery_count(message("m1"), 19), true));
  EXPECT_TRUE(client_bytes().empty());
  Copy copy = republished();
  EXPECT_EQ(copy.publish.routing_key, "q");
  EXPECT_EQ(copy.header_text("x-delivery-count"), "absent");
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(2)}));
  EXPECT_EQ(listener.requeues,
            (std::vector<retry::Action>{retry::Action::forward, retry::Action::republish}));
}

TEST_F(GuardQuorum, ARefusedRepublishFallsBackAndSaysTheBrokersLimitMayEndIt) {
  broker_version = "4.0.5";
  start(policy(30));
  broker(delivery(1, with_delivery_count(message("m1"), 20), true));
  republished();
  refuse(1);
  EXPECT_EQ(to_broker(), frames({nack(1)}));
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_EQ(listener.fallbacks[0].cause, "at_broker_limit");
  EXPECT_NE(listener.fallbacks[0].detail.find("republish_failed: "), std::string::npos);
}

TEST_F(GuardQuorum, OnThreeDotTenNoDefaultLimit) {
  broker_version = "3.10.8";
  start(policy(30));
  deliver_passes(delivery(1, with_delivery_count(message("m1"), 20), true));
  client_passes(nack(1));
}

TEST_F(GuardQuorum, PolicyKeyNoneTurnsTheDefaultOff) {
  broker_version = "4.0.5";
  retry::Policy p = policy(30);
  p.broker_delivery_limit.kind = retry::BrokerDeliveryLimit::Kind::none;
  start(p);
  deliver_passes(delivery(1, with_delivery_count(message("m1"), 20), true));
  client_passes(nack(1));
}

TEST_F(GuardQuorum, ARequeueThatWouldPassADeclaredLimitIsTakenOverAsARepublish) {
  broker_version = "3.10.8";
  start(policy(30));
  const Message m = with_delivery_count(message("m1"), 5);
  deliver_passes(delivery(1, m, true));
  // The limit is learnt only now, from the client's own declaration.
  declare_quorum(5);
  client(nack(1));
  Copy copy = republished();
  EXPECT_EQ(copy.publish.routing_key, "q");
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(6)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(1)}));  // the nack never reached the broker
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::republish});
}

TEST_F(GuardQuorum, APolicyLimitReachedWhereTheBrokersIsTooIsDeadLetteredWithItsReason) {
  retry::Policy p = policy(3);
  p.broker_delivery_limit = {retry::BrokerDeliveryLimit::Kind::fixed, 4};
  start(p);
  const Message m = message("m1");
  deliver_passes(delivery(1, m));
  client_passes(nack(1));
  deliver_passes(delivery(2, with_delivery_count(m, 1), true));
  client_passes(nack(2));
  deliver_passes(delivery(3, with_delivery_count(m, 2), true));
  client_passes(nack(3));
  // x-delivery-count 3 leaves limit 4 no room for a return and one the client never sees
  // (retry::kUnseenReturns): republished before the consumer sees it.
  broker(delivery(4, with_delivery_count(m, 3), true));
  EXPECT_TRUE(client_bytes().empty());
  Copy copy = republished();
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(3)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(4)}));
  // The copy's fourth return passes max_redeliveries 3: dead-lettered (by count).
  broker(delivery(5, message("m1", 3)));
  std::vector<Wire> got = to_client();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(as<amqp::BasicDeliver>(got[0]).delivery_tag, 4u);
  client(nack(4));
  EXPECT_EQ(to_broker(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  Copy dead = take_copy(to_broker());
  EXPECT_EQ(dead.header_text("x-nackguard-reason"),
            text(amqp::FieldValue::string("max_redeliveries")));
  confirm(2);
  EXPECT_EQ(to_broker(), frames({ack(5)}));
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:m1", 4, DeadLetterReason::max_redeliveries}}));
}

TEST_F(GuardQuorum, LimitLearntAtTheReturnAndPolicyReachedDeadLettersAsBrokerDeliveryLimit) {
  start(policy(3));
  const Message m = message("m1");
  for (std::uint64_t tag = 1; tag <= 3; ++tag) {
    deliver_passes(
        delivery(tag, with_delivery_count(m, static_cast<std::int64_t>(tag - 1)), tag > 1));
    client_passes(nack(tag));
  }
  deliver_passes(delivery(4, with_delivery_count(m, 3), true));
  declare_quorum(3);
  client(nack(4));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  Copy dead = take_copy(to_broker());
  EXPECT_EQ(dead.header_text("x-nackguard-reason"),
            text(amqp::FieldValue::string("broker_delivery_limit")));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(4)}));
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:m1", 4, DeadLetterReason::broker_delivery_limit}}));
}

TEST_F(GuardQuorum, AHeldDeliveryAtTheLimitIsRepublishedInsteadOfWaiting) {
  broker_version = "4.0.5";
  start(policy(30));
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
  EXPECT_EQ(to_broker(), frames({ack(2)}));
}

TEST_F(GuardQuorum, WhileItsDlqIsRefusedAMessageAtTheLimitIsStillRepublished) {
  broker_version = "4.0.5";
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(nack(1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(channel_close(403, "ACCESS_REFUSED - configure access to queue 'q.dlq' refused", 50, 10));
  // The copy failed: the consumer's own nack goes to the broker, and copies for "q" fall back
  // for a while.
  EXPECT_EQ(reopen_proxy_channel(), frames({nack(1)}));
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
  EXPECT_EQ(to_broker(), frames({ack(2)}));
}

TEST_F(GuardQuorum, QuorumSourceGetsQuorumDelayQueuesThatDeadLetterAtLeastOnce) {
  retry::Policy p = policy(5);
  p.requeue = retry::RequeueMode::delayed;
  start(p);
  declare_quorum(std::nullopt);
  deliver_passes(delivery(1, message("m1")));
  client(nack(1));
  amqp::FieldTable args;
  args.set("x-queue-type", amqp::FieldValue::string("quorum"));
  args.set("x-message-ttl", amqp::FieldValue::i64(1000));
  args.set("x-dead-letter-exchange", amqp::FieldValue::string(""));
  args.set("x-dead-letter-routing-key", amqp::FieldValue::string(kQueue));
  args.set("x-dead-letter-strategy", amqp::FieldValue::string("at-least-once"));
  args.set("x-overflow", amqp::FieldValue::string("reject-publish"));
  args.set("x-expires", amqp::FieldValue::i64(2 * 1000 + 60000));
  EXPECT_EQ(open_proxy_channel(),
            frames({method(kProxyChannel, durable_declare("nackguard.delay.q.1000ms", args))}));
}

TEST_F(GuardQuorum, ThreeDotXMarksAQuorumQueuesFirstDeliveryWhichTellsItsType) {
  // RabbitMQ 3.x sets x-delivery-count 0 on a quorum queue's basic.get-ok: a queue declared
  // elsewhere is then known as quorum before its first return.
  retry::Policy p = policy(5);
  p.requeue = retry::RequeueMode::delayed;
  start(p);
  deliver_passes(delivery(1, with_delivery_count(message("m1"), 0)));
  client(nack(1));
  std::vector<Wire> sent = open_proxy_channel();
  ASSERT_EQ(sent.size(), 1u);
  const amqp::QueueDeclare declare = as<amqp::QueueDeclare>(sent[0]);
  EXPECT_EQ(declare.queue, "nackguard.delay.q.1000ms");
  EXPECT_EQ(text(declare.arguments.find("x-queue-type")), text(amqp::FieldValue::string("quorum")));
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
  start(p);
  declare_quorum(std::nullopt);
  deliver_passes(delivery(1, message("m1")));
  client(nack(1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(channel_close(404, "NOT_FOUND - no queue 'q.dlq' in vhost '/'", 50, 10));
  EXPECT_EQ(reopen_proxy_channel(), frames({method(kProxyChannel, durable_declare("q.dlq"))}));
}

}  // namespace
}  // namespace nackguard::session::guard_test
