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

class GuardCrash : public GuardTest {
 protected:
  // m1 and m2 pass, the client goes away holding both (each counted once, neither to blame: two
  // were in hand), and the broker redelivers them on the next connection: m1 reaches the client,
  // m2 waits behind the suspect. Returns m2's redelivery, the one held back.
  Bytes crash_holding_two(const Message& m1, const Message& m2) {
    deliver_passes(delivery(1, m1));
    deliver_passes(delivery(2, m2));
    client_eof();
    connect();
    const Bytes r1 = delivery(1, m1, true), r2 = delivery(2, m2, true);
    broker(cat({r1, r2}));
    EXPECT_EQ(to_client(), decode_frames(r1));
    return r2;
  }
  // The client goes away holding tags 1 and 2: the proxy declares q.dlq and takes both over,
  // the first dead-lettered there for crash_loop. Fills `copies` with the two.
  void crash_dead_letters_the_first(std::vector<Copy>& copies) {
    std::vector<std::string> declared;
    copies = client_eof_with_copies({1, 2}, &declared);
    EXPECT_EQ(declared, std::vector<std::string>{"q.dlq"});
    ASSERT_EQ(copies.size(), 2u);
    EXPECT_EQ(copies[0].publish.routing_key, "q.dlq");
    EXPECT_EQ(copies[0].header_text("x-nackguard-reason"),
              text(amqp::FieldValue::string("crash_loop")));
  }
};

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

  client(ack(kCh, 1));
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  EXPECT_EQ(to_client(), decode_frames(r2));  // the second, alone, as it came
  client(ack(kCh, 2));
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2)}));
  EXPECT_EQ(to_client(), decode_frames(r3));
  client(ack(kCh, 3));
  EXPECT_EQ(to_broker(), frames({ack(kCh, 3)}));
  EXPECT_TRUE(client_bytes().empty());
  for (const char* id : {"m1", "m2", "m3"}) EXPECT_FALSE(tracked(id)) << id;
  EXPECT_TRUE(listener.dead_letters.empty());
}

TEST_F(GuardCrash, NackOfASuspectReleasesTheNextToo) {
  start(policy(5));
  const Bytes r2 = crash_holding_two(message("m1"), message("m2"));
  // Returns 2 of 5: redelivered already, its flag carries the first. So this one goes back as a
  // copy with its count, to the tail of its queue.
  client(nack(kCh, 1));
  EXPECT_EQ(to_client(), decode_frames(r2));
  EXPECT_EQ(tracked("m1")->returns, 2u);
  EXPECT_FALSE(tracked("m1")->crash_suspect);  // a nack is not a crash
  const std::vector<Wire> sent = open_proxy_channel();
  Copy copy = take_copy(sent);
  EXPECT_EQ(copy.publish.routing_key, "q");
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  EXPECT_EQ(copy.header_text("x-nackguard-returns-queue"), text(amqp::FieldValue::string("q")));
  EXPECT_EQ(copy.header_text("x-nackguard-suspect"), "absent");
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::republish});
}

TEST_F(GuardCrash, CrashLoopIsCopiedAtEachCrashAndDeadLetteredAtTheLast) {
  start(policy(2));
  const Message poison = message("m1");
  deliver_passes(delivery(1, poison));
  client_eof();  // its first return: the broker's redelivered flag carries it
  ASSERT_TRUE(tracked("m1"));
  EXPECT_EQ(tracked("m1")->returns, 1u);
  EXPECT_TRUE(tracked("m1")->crash_suspect);

  // Handed out alone, it kills the consumer again: a return the flag cannot carry. The proxy
  // keeps the original from the broker until a copy with the count is confirmed, then acks it.
  now += 1000;
  connect();
  deliver_passes(delivery(1, poison, true));
  const Copy second = client_eof_with_copy(1);
  EXPECT_EQ(second.publish.routing_key, "q");
  EXPECT_EQ(second.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  EXPECT_EQ(second.header_text("x-nackguard-suspect"), text(amqp::FieldValue::boolean(true)));
  EXPECT_EQ(second.body, bytes_of(poison.body));

  // Whichever proxy delivers the copy hands it out alone (a new context: another sidecar).
  // Its third crash is past the limit: dead-lettered at the crash, reason crash_loop.
  now += 1000;
  start(policy(2));
  const Message copy = delivered(poison, second);
  const Message m2 = message("m2");
  broker(cat({delivery(1, copy), delivery(2, m2)}));
  // Handed out as a retry (redelivered), alone: m2 waits behind it.
  EXPECT_EQ(to_client(), decode_frames(delivery(1, copy, true)));
  std::vector<Copy> copies;
  ASSERT_NO_FATAL_FAILURE(crash_dead_letters_the_first(copies));
  const Copy& dead = copies[0];
  EXPECT_EQ(dead.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(3)));
  EXPECT_EQ(dead.header_text("x-nackguard-suspect"), "absent");
  EXPECT_EQ(dead.body, bytes_of(poison.body));
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:m1", 3, DeadLetterReason::crash_loop}}));
  EXPECT_FALSE(tracked("m1"));
  // m2 waited in the proxy: not the consumer's. Taken over too, as the broker's requeue would
  // set its flag, it goes back uncounted.
  EXPECT_EQ(copies[1].publish.routing_key, "q");
  EXPECT_EQ(copies[1].header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(0)));
  EXPECT_EQ(copies[1].body, bytes_of(m2.body));
  EXPECT_FALSE(tracked("m2"));  // nothing to remember: never returned
}

TEST_F(GuardCrash, OnlyTheDeliveryHandedOutIsBlamedAndDeadLetteredAtTheCrash) {
  start(policy(1));
  const Message m1 = message("m1"), m2 = message("m2");
  crash_holding_two(m1, m2);
  // The consumer died holding m1 alone: m1 is the culprit, past its limit, dead-lettered at the
  // crash. m2, held in the proxy, is not counted, and taken over too: republished with its
  // count, its flag from the broker's requeue would read as a return elsewhere.
  std::vector<Copy> copies;
  ASSERT_NO_FATAL_FAILURE(crash_dead_letters_the_first(copies));
  const Copy& dead = copies[0];
  EXPECT_EQ(dead.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  EXPECT_EQ(dead.body, bytes_of(m1.body));
  EXPECT_EQ(copies[1].publish.routing_key, "q");
  EXPECT_EQ(copies[1].header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
  EXPECT_EQ(copies[1].body, bytes_of(m2.body));
  EXPECT_FALSE(tracked("m1"));
  ASSERT_TRUE(tracked("m2"));
  EXPECT_EQ(tracked("m2")->returns, 1u);

  // m2's copy comes: still a suspect, alone; acked, it is forgotten.
  connect();
  const Bytes r2 = delivery(1, delivered(m2, copies[1]));
  broker(r2);
  ASSERT_EQ(to_client().size(), decode_frames(r2).size());
  client_passes(ack(kCh, 1));
  EXPECT_FALSE(tracked("m2"));
  EXPECT_EQ(listener.dead_letters.size(), 1u);
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

TEST_F(GuardCrash, CrashUnderADelayedPolicyIsDelayedAtTheCrash) {
  retry::Policy p = policy(10);
  p.requeue = retry::RequeueMode::delayed;
  start(p);
  deliver_passes(delivery(1, message("m1")));
  const Copy copy = client_eof_with_copy(1, "nackguard.delay.q.1000ms");
  EXPECT_EQ(copy.publish.routing_key, "nackguard.delay.q.1000ms");
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(1)));
  // It was alone in the consumer's hands: the copy is handed out alone when it comes back.
  EXPECT_EQ(copy.header_text("x-nackguard-suspect"), text(amqp::FieldValue::boolean(true)));
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::delay});
}

TEST_F(GuardCrash, ACrashThatCannotBeTakenOverIsDelayedAtTheNextDelivery) {
  // The broker closed the channel itself (a channel error): nothing can be kept from it, so the
  // decision waits for the message's next delivery through this proxy.
  retry::Policy p = policy(10);
  p.requeue = retry::RequeueMode::delayed;
  start(p);
  deliver_passes(delivery(1, message("m1")));
  broker(channel_close(404, "NOT_FOUND - no exchange 'x'", 40, 10, kCh));
  client_bytes();
  client(method(kCh, amqp::ChannelCloseOk{}));
  broker_bytes();
  EXPECT_EQ(tracked("m1")->pending_action, retry::Action::delay);
  open_and_consume();
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
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
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
  start(outage_policy(5, 3));
  fresh_deliveries_pass(1, 3);
  client_eof();  // 3 of 3 unacked: one crash, a ratio of 1/3
  EXPECT_TRUE(listener.outages.empty());
  EXPECT_EQ(listener.returns, 3);
}

TEST_F(GuardCrash, HeldBackDeliveriesAreReleasedAfterTheSuspectHold) {
  start(policy(5));
  const Bytes r2 = crash_holding_two(message("m1"), message("m2"));
  // The consumer sits on the first (it may want a batch before acking).
  conn->session.on_tick(5000);
  conn->session.on_tick(14999);
  EXPECT_TRUE(client_bytes().empty());
  conn->session.on_tick(15000);
  EXPECT_EQ(to_client(), decode_frames(r2));
  client(ack(kCh, 2, true));
  EXPECT_EQ(to_broker(), frames({ack(kCh, 2, true)}));
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

TEST_F(GuardCrash, AClientGoneBeforeTheConfirmStillHasItsCopySettled) {
  dead_letter_in_flight();
  // The client goes away before the confirm: the broker side waits for it, so that the
  // original is acked rather than requeued beside its copy.
  conn->session.on_eof(Side::client);
  EXPECT_FALSE(conn->session.finished());
  EXPECT_EQ(to_broker(), frames({cancel_consumer()}));
  broker(method(kCh, amqp::BasicCancelOk{kConsumer}));
  confirm(1);
  // The ack goes before a close that has the broker apply it (issue 37).
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1), gone_client_close()}));
  broker(method(0, amqp::ConnectionCloseOk{}));
  EXPECT_TRUE(conn->session.finished());
  conn->guard.on_connection_end();
  EXPECT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_TRUE(listener.fallbacks.empty());
}

TEST_F(GuardCrash, ConnectionLostWithACopyInFlightAcksNothing) {
  dead_letter_in_flight();
  // The broker side goes away before the confirm: the broker takes the original back.
  conn->session.on_eof(Side::broker);
  conn->guard.on_connection_end();
  EXPECT_TRUE(listener.dead_letters.empty());
  EXPECT_TRUE(listener.fallbacks.empty());
  confirm(1);  // the session is closed: nothing is read any more
  EXPECT_TRUE(broker_bytes().empty());
}

// While the proxy holds a crashed client's connection open for a copy's confirm, the broker
// may deliver more to the dead client until its cancel-ok (even the copy itself, on a queue
// that holds nothing else). The client never sees it: it is republished with the count it
// carries, never counted.
TEST_F(GuardCrash, ADeliveryDuringTheCrashHoldIsReturnedUncounted) {
  start(policy(5));
  const Message poison = message("m1");
  deliver_passes(delivery(1, poison));
  client_eof();
  connect();
  deliver_passes(delivery(1, poison, true));
  conn->session.on_eof(Side::client);
  std::vector<Wire> sent = to_broker();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent[0], frames({cancel_consumer()})[0]);  // answered below
  sent.erase(sent.begin());
  const Copy copy = take_copy(past_proxy_channel_open(sent));
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  // The copy reaches the channel before the cancel-ok and its confirm: republished with the
  // same count, the client never having seen it.
  const Message back = delivered(poison, copy);
  broker(delivery(2, back));
  const Copy again = take_copy(to_broker());
  EXPECT_EQ(again.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  confirm(2, true);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1), ack(kCh, 2)}));
  EXPECT_FALSE(conn->session.finished());
  broker(method(kCh, amqp::BasicCancelOk{kConsumer}));
  EXPECT_EQ(to_broker(), frames({gone_client_close()}));
  broker(method(0, amqp::ConnectionCloseOk{}));
  EXPECT_TRUE(conn->session.finished());
  conn->guard.on_connection_end();
  ASSERT_TRUE(tracked("m1"));
  EXPECT_EQ(tracked("m1")->returns, 2u);
  // Redelivered, it carries its count and no more: its next crash makes 3, which its flag
  // cannot carry: a copy.
  // Redelivered, it carries its count and no more; shown as a retry. Its next crash makes 3,
  // the first since the copy: the broker's flag carries it.
  connect();
  broker(delivery(1, delivered(poison, again)));
  EXPECT_EQ(to_client(), decode_frames(delivery(1, delivered(poison, again), true)));
  client_eof();
  EXPECT_EQ(tracked("m1")->returns, 3u);
}

}  // namespace
}  // namespace nackguard::session::guard_test
