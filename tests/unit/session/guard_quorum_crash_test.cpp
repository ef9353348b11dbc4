// A consumer that crashes on a quorum queue's message: the broker counts each crash against
// every message the consumer had, or that waited for it in the proxy; nackguard counts only the
// one the consumer held alone, so the broker's count never dead-letters an innocent message.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using retry::DeadLetterReason;

class GuardQuorumCrash : public GuardTest {};

// Issue 37, defect 1: the poison handed out alone crashes the consumer again and again, the
// innocent message waiting inside the proxy behind it; the broker counts every crash against
// both. The broker's limit is known to be none here, so that nothing is republished at a
// delivery and the broker's counts grow as they do.
TEST_F(GuardQuorumCrash, InnocentPrefetchedWithACrashingPoisonIsNeverDeadLettered) {
  retry::Policy p = policy(3);
  p.broker_delivery_limit.kind = retry::BrokerDeliveryLimit::Kind::none;
  start(p);
  Message poison = message("poison");
  const Message innocent = message("innocent");
  deliver_passes(delivery(1, poison));
  deliver_passes(delivery(2, innocent));
  client_eof();  // both counted once: nackguard cannot tell which one killed the consumer
  EXPECT_EQ(tracked("innocent")->returns, 1u);

  // The poison alone, the innocent held back behind it: the consumer dies holding the poison
  // alone. Its count (2) is more than its flag can carry: a copy carries it. The innocent goes
  // back as a copy too, uncounted: the broker's requeue would count it.
  now += 1000;
  connect();
  broker(cat({delivery(1, with_delivery_count(poison, 1), true),
              delivery(2, with_delivery_count(innocent, 1), true)}));
  EXPECT_EQ(to_client(), decode_frames(delivery(1, with_delivery_count(poison, 1), true)));
  std::vector<Copy> copies = client_eof_with_copies({1, 2});
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  EXPECT_EQ(copies[0].header_text("x-delivery-count"), "absent");
  EXPECT_EQ(copies[1].header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
  EXPECT_EQ(copies[1].header_text("x-delivery-count"), "absent");
  // From a quorum queue: their count is whole, the flag will count nothing.
  EXPECT_EQ(copies[0].header_text("x-nackguard-exact"), text(amqp::FieldValue::boolean(true)));
  EXPECT_EQ(copies[1].header_text("x-nackguard-exact"), text(amqp::FieldValue::boolean(true)));
  poison = delivered(poison, copies[0]);
  Message innocent_copy = delivered(innocent, copies[1]);

  // The copies, the poison alone again. Its third crash is written into a copy too: a quorum
  // queue's redelivered flag may stand for a return no consumer made.
  now += 1000;
  connect();
  broker(cat({delivery(1, poison), delivery(2, innocent_copy)}));
  EXPECT_EQ(to_client(), decode_frames(delivery(1, poison, true)));  // a retry
  copies = client_eof_with_copies({1, 2});
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(3)));
  EXPECT_EQ(copies[1].header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
  poison = delivered(poison, copies[0]);
  innocent_copy = delivered(innocent, copies[1]);
  EXPECT_EQ(tracked("poison")->returns, 3u);

  // The fourth crash is past the limit: dead-lettered at the crash, reason crash_loop.
  now += 1000;
  connect();
  broker(cat({delivery(1, poison), delivery(2, innocent_copy)}));
  EXPECT_EQ(to_client(), decode_frames(delivery(1, poison, true)));
  std::vector<std::string> declared;
  copies = client_eof_with_copies({1, 2}, &declared);
  EXPECT_EQ(declared, std::vector<std::string>{"q.dlq"});
  ASSERT_EQ(copies.size(), 2u);
  const Copy& dead = copies[0];
  EXPECT_EQ(dead.header_text("x-nackguard-reason"), text(amqp::FieldValue::string("crash_loop")));
  EXPECT_EQ(dead.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(4)));
  EXPECT_EQ(dead.header_text("x-delivery-count"), "absent");
  EXPECT_EQ(dead.header_text("x-nackguard-exact"), "absent");  // history in its DLQ
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:poison", 4, DeadLetterReason::crash_loop}}));

  // The innocent waited inside the proxy through three crashes: its count is still 1, and it
  // is handed out (as a retry, alone: a suspect still); acked, it is forgotten.
  innocent_copy = delivered(innocent, copies[1]);
  now += 1000;
  connect();
  broker(delivery(1, innocent_copy));
  EXPECT_EQ(to_client(), decode_frames(delivery(1, innocent_copy, true)));
  EXPECT_EQ(tracked("innocent")->returns, 1u);
  client_passes(ack(kCh, 1));
  EXPECT_FALSE(tracked("innocent"));
  EXPECT_EQ(listener.dead_letters.size(), 1u);
}

// On a queue known to be a quorum queue, a crash return is written into a copy marked suspect,
// the first too: the redelivered flag may stand for a return no consumer made, and whichever
// sidecar delivers the message next must know to hand it out alone.
TEST_F(GuardQuorumCrash, OnAQuorumQueueEveryCrashReturnIsACopyMarkedSuspect) {
  start(policy(3));
  amqp::QueueDeclare declare;
  declare.queue = kQueue;
  declare.durable = true;
  declare.arguments.set("x-queue-type", amqp::FieldValue::string("quorum"));
  client_passes(method(kCh, declare));
  deliver_passes(method(kCh, amqp::QueueDeclareOk{kQueue, 0, 0}));
  deliver_passes(delivery(1, message("m1")));
  deliver_passes(delivery(2, message("m2")));
  const std::vector<Copy> copies = client_eof_with_copies({1, 2});
  ASSERT_EQ(copies.size(), 2u);
  for (const Copy& copy : copies) {
    EXPECT_EQ(copy.publish.routing_key, "q");
    EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
    EXPECT_EQ(copy.header_text("x-nackguard-suspect"), text(amqp::FieldValue::boolean(true)));
    EXPECT_EQ(copy.header_text("x-nackguard-exact"), text(amqp::FieldValue::boolean(true)));
  }
  EXPECT_TRUE(listener.dead_letters.empty());
}

}  // namespace
}  // namespace nackguard::session::guard_test
