// Crash returns: a consumer whose connection ends with deliveries unacked gives them back
// without a nack. The guard counts them, hands each out alone at its next delivery (so a
// second crash names the culprit), and carries out a crash's decision at that delivery:
// taken over before the client sees it and dead-lettered or delayed. Each connection is a new
// Session and Guard on the same retry::GuardContext, as the relay makes them.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using retry::DeadLetterReason;

class GuardCrash : public GuardTest {};

TEST_F(GuardCrash, SuspectsAreHandedOutOneAtATime) {
  start(policy(5));
  const Message m1 = message("m1"), m2 = message("m2"), m3 = message("m3");
  deliver_passes(delivery(1, m1));
  deliver_passes(delivery(2, m2));
  deliver_passes(delivery(3, m3));
  client_eof();
  EXPECT_EQ(listener.returns, 3);
  for (const char* id : {"m1", "m2", "m3"}) {
    ASSERT_TRUE(tracked(id)) << id;
    EXPECT_EQ(tracked(id)->returns, 1u) << id;
    EXPECT_TRUE(tracked(id)->crash_suspect) << id;
  }

  connect();
  const Bytes r1 = delivery(1, m1, true), r2 = delivery(2, m2, true), r3 = delivery(3, m3, true);
  broker(r1);
  broker(r2);
  broker(r3);
  // Only the first: the other two wait in the proxy.
  EXPECT_EQ(to_client(), decode_frames(r1));

  client(ack(1));
  EXPECT_EQ(to_broker(), frames({ack(1)}));
  EXPECT_EQ(to_client(), decode_frames(r2));  // the second, alone, as it came
  client(ack(2));
  EXPECT_EQ(to_broker(), frames({ack(2)}));
  EXPECT_EQ(to_client(), decode_frames(r3));
  client(ack(3));
  EXPECT_EQ(to_broker(), frames({ack(3)}));
  EXPECT_TRUE(client_bytes().empty());
  for (const char* id : {"m1", "m2", "m3"}) EXPECT_FALSE(tracked(id)) << id;
  EXPECT_TRUE(listener.dead_letters.empty());
}

TEST_F(GuardCrash, NackOfASuspectReleasesTheNextToo) {
  start(policy(5));
  deliver_passes(delivery(1, message("m1")));
  deliver_passes(delivery(2, message("m2")));
  client_eof();
  connect();
  const Bytes r1 = delivery(1, message("m1"), true), r2 = delivery(2, message("m2"), true);
  broker(cat({r1, r2}));
  EXPECT_EQ(to_client(), decode_frames(r1));
  client_passes(nack(1));  // returns 2 of 5: forwarded as it is
  EXPECT_EQ(to_client(), decode_frames(r2));
  EXPECT_EQ(tracked("m1")->returns, 2u);
  EXPECT_FALSE(tracked("m1")->crash_suspect);  // a nack is not a crash
}

TEST_F(GuardCrash, CrashLoopIsTakenOverAtItsNextDeliveryAndDeadLettered) {
  start(policy(2));
  const Message poison = message("m1");
  deliver_passes(delivery(1, poison));
  client_eof();
  for (int crash = 2; crash <= 3; ++crash) {
    now += 1000;
    connect();
    deliver_passes(delivery(1, poison, true));  // a suspect: alone, but handed out
    client_eof();
  }
  ASSERT_TRUE(tracked("m1"));
  EXPECT_EQ(tracked("m1")->returns, 3u);
  EXPECT_EQ(tracked("m1")->pending_action, static_cast<std::uint8_t>(retry::Action::dead_letter));

  // The fourth connection: the poison never reaches the consumer.
  now += 1000;
  connect();
  broker(delivery(1, poison, true));
  EXPECT_TRUE(client_bytes().empty());
  // The client's deliveries are numbered without the gap.
  const Message m2 = message("m2"), m3 = message("m3");
  broker(delivery(2, m2));
  broker(delivery(3, m3));
  std::vector<Wire> got = to_client();
  ASSERT_EQ(got.size(), 6u);
  amqp::BasicDeliver first = as<amqp::BasicDeliver>(got[0]);
  EXPECT_EQ(first.delivery_tag, 1u);
  EXPECT_EQ(first.consumer_tag, "c1");
  EXPECT_FALSE(first.redelivered);
  EXPECT_EQ(first.exchange, "ex");
  EXPECT_EQ(first.routing_key, "rk");
  EXPECT_EQ(got[1], decode_frames(content_header(kCh, m2.body.size(), m2.properties))[0]);
  EXPECT_EQ(got[2].payload, bytes_of(m2.body));
  EXPECT_EQ(as<amqp::BasicDeliver>(got[3]).delivery_tag, 2u);
  EXPECT_EQ(got[5].payload, bytes_of(m3.body));

  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  std::vector<Wire> sent = to_broker();
  Copy copy = take_copy(sent);
  EXPECT_EQ(copy.frames, sent.size());
  EXPECT_EQ(copy.publish.routing_key, "q.dlq");
  EXPECT_EQ(copy.header_text("x-nackguard-reason"), text(amqp::FieldValue::string("crash_loop")));
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(3)));
  EXPECT_EQ(copy.body, bytes_of(poison.body));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(1)}));

  // The client's acks reach the broker under the broker's tags.
  client(ack(1));
  EXPECT_EQ(to_broker(), frames({ack(2)}));
  client(ack(2));
  EXPECT_EQ(to_broker(), frames({ack(3)}));

  using Dl = RecordingListener::DeadLettered;
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:m1", 3, DeadLetterReason::crash_loop}}));
  EXPECT_FALSE(tracked("m1"));
  EXPECT_TRUE(client_bytes().empty());
}

TEST_F(GuardCrash, OnlyTheDeliveryHandedOutIsBlamedAndAHeldCulpritIsTakenOverOnRelease) {
  start(policy(1));
  const Message m1 = message("m1"), m2 = message("m2");
  deliver_passes(delivery(1, m1));
  deliver_passes(delivery(2, m2));
  client_eof();  // both counted once

  connect();
  broker(cat({delivery(1, m1, true), delivery(2, m2, true)}));
  EXPECT_EQ(to_client(), decode_frames(delivery(1, m1, true)));  // m2 waits behind the suspect
  client_eof();  // the consumer died holding m1 alone: only m1 is counted
  EXPECT_EQ(tracked("m1")->returns, 2u);
  EXPECT_EQ(tracked("m2")->returns, 1u);

  // The broker may redeliver in another order: m2 first (a suspect, so alone), m1 held back
  // behind it. Released when m2 is acked, m1 is found past its limit and taken over.
  connect();
  const Bytes r2 = delivery(1, m2, true);
  broker(cat({r2, delivery(2, m1, true)}));
  EXPECT_EQ(to_client(), decode_frames(r2));
  client(ack(1));
  EXPECT_EQ(to_broker(), frames({ack(1), method(kProxyChannel, amqp::ChannelOpen{})}));
  EXPECT_TRUE(client_bytes().empty());
  broker(method(kProxyChannel, amqp::ChannelOpenOk{}));
  broker(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  broker(declare_ok("q.dlq"));
  std::vector<Wire> sent = to_broker();
  ASSERT_EQ(sent.size(), 2u + 3u);
  Copy copy = take_copy(sent, 2);
  EXPECT_EQ(copy.header_text("x-nackguard-reason"), text(amqp::FieldValue::string("crash_loop")));
  EXPECT_EQ(copy.body, bytes_of(m1.body));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(2)}));
  EXPECT_TRUE(client_bytes().empty());
}

// The broker's side going away (a node restart, a network failure) is not the consumer
// crashing on a message: the deliveries it held are requeued by the broker, but should not be
// counted against them nor make them suspects, as the proxy's own graceful shutdown does not.
TEST_F(GuardCrash, BrokerConnectionLossIsNotTheConsumersCrash) {
  start(policy(5));
  deliver_passes(delivery(1, message("m1")));
  deliver_passes(delivery(2, message("m2")));
  conn->session.on_eof(Side::broker);
  conn->guard.on_connection_end();
  EXPECT_EQ(listener.returns, 0);
  EXPECT_FALSE(tracked("m1") && tracked("m1")->crash_suspect);
  EXPECT_FALSE(tracked("m2") && tracked("m2")->crash_suspect);

  // The next connection gets both redeliveries at once.
  connect();
  const Bytes r1 = delivery(1, message("m1"), true), r2 = delivery(2, message("m2"), true);
  broker(cat({r1, r2}));
  EXPECT_EQ(to_client(), decode_frames(cat({r1, r2})));
}

TEST_F(GuardCrash, CrashUnderADelayedPolicyIsDelayedAtTheNextDelivery) {
  retry::Policy p = policy(10);
  p.requeue = retry::RequeueMode::delayed;
  start(p);
  deliver_passes(delivery(1, message("m1")));
  client_eof();
  connect();
  broker(delivery(1, message("m1"), true));
  EXPECT_TRUE(client_bytes().empty());
  std::vector<Wire> declare = open_proxy_channel();
  ASSERT_EQ(declare.size(), 1u);
  EXPECT_EQ(as<amqp::QueueDeclare>(declare[0]).queue, "nackguard.delay.q.1000ms");
  broker(declare_ok("nackguard.delay.q.1000ms"));
  Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.publish.routing_key, "nackguard.delay.q.1000ms");
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(1)}));
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::delay});
}

TEST_F(GuardCrash, RecoverCountsButSuspectsNobody) {
  start(policy(5));
  deliver_passes(delivery(1, message("m1")));
  deliver_passes(delivery(2, message("m2")));
  client_passes(method(kCh, amqp::BasicRecover{true}));
  EXPECT_EQ(listener.returns, 2);
  EXPECT_EQ(tracked("m1")->returns, 1u);
  EXPECT_FALSE(tracked("m1")->crash_suspect);
  // Both redeliveries are handed out at once.
  const Bytes r1 = delivery(3, message("m1"), true), r2 = delivery(4, message("m2"), true);
  broker(cat({r1, r2}));
  EXPECT_EQ(to_client(), decode_frames(cat({r1, r2})));
}

TEST_F(GuardCrash, AllPrefetchedDeliveriesCountAsOneReturnInTheQueuesHealth) {
  retry::Policy p = policy(5);
  p.rate.min_messages = 3;
  p.rate.outage_ratio = 0.5;
  start(p);
  for (std::uint64_t tag = 1; tag <= 3; ++tag) {
    deliver_passes(delivery(tag, message("m" + std::to_string(tag))));
  }
  client_eof();  // 3 of 3 unacked: one crash, a ratio of 1/3
  EXPECT_TRUE(listener.outages.empty());
  EXPECT_EQ(listener.returns, 3);
}

TEST_F(GuardCrash, HeldBackDeliveriesAreReleasedAfterTheSuspectHold) {
  start(policy(5));
  deliver_passes(delivery(1, message("m1")));
  deliver_passes(delivery(2, message("m2")));
  client_eof();
  connect();
  const Bytes r1 = delivery(1, message("m1"), true), r2 = delivery(2, message("m2"), true);
  broker(cat({r1, r2}));
  EXPECT_EQ(to_client(), decode_frames(r1));
  // The consumer sits on the first (it may want a batch before acking).
  conn->session.on_tick(5000);
  conn->session.on_tick(14999);
  EXPECT_TRUE(client_bytes().empty());
  conn->session.on_tick(15000);
  EXPECT_EQ(to_client(), decode_frames(r2));
  client(ack(2, true));
  EXPECT_EQ(to_broker(), frames({ack(2, true)}));
}

TEST_F(GuardCrash, SuspectsThatCannotBeHeldWithinTheBudgetAreHandedOut) {
  // Room for the deliveries' records (counted in the budget too), not for a 4000-byte body.
  constexpr std::uint64_t kLimit = 2048;
  retry::GuardSettings settings;
  settings.retained_body_bytes = kLimit;
  start(policy(5), settings, /*sessions_use_budget=*/true);
  auto big = [](Message m) {
    m.body = std::string(4000, 'b');
    return m;
  };
  deliver_passes(delivery(1, big(message("m1"))));
  deliver_passes(delivery(2, big(message("m2"))));
  client_eof();
  connect();
  const Bytes r1 = delivery(1, big(message("m1")), true),
              r2 = delivery(2, big(message("m2")), true);
  broker(cat({r1, r2}));
  EXPECT_EQ(to_client(), decode_frames(cat({r1, r2})));
  EXPECT_EQ(conn->session.channel(kCh)->unacked_count(), 2u);  // recorded, not held back
  EXPECT_LE(context->budget().used(), kLimit);
}

TEST_F(GuardCrash, ConnectionEndingWithACopyInFlightAcksNothing) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  client(nack(1));
  open_proxy_channel();
  broker(declare_ok("q.dlq"));
  to_broker();
  // The client goes away before the confirm: the broker takes the original back.
  conn->session.on_eof(Side::client);
  conn->guard.on_connection_end();
  EXPECT_TRUE(listener.dead_letters.empty());
  EXPECT_TRUE(listener.fallbacks.empty());
  confirm(1);  // the session is closed: nothing is read any more
  EXPECT_TRUE(broker_bytes().empty());
}

}  // namespace
}  // namespace nackguard::session::guard_test
