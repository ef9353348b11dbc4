// Channels and connections that end: every delivery still outstanding is returned once.

#include <gtest/gtest.h>

#include "session/tracking_fixture.hpp"

namespace nackguard::session::test {
namespace {

class SessionChannelEnd : public SessionTracking {};

TEST_F(SessionChannelEnd, ChannelClosedByClientReturnsWhatItHeldAtItsClose) {
  consume(1, "q", "c1");
  consume(2, "q", "c2");
  deliveries(1, "c1", 1, 3);
  deliveries(2, "c2", 1, 1);
  client_passes(ack(1, 1));
  link.observer.take_events();
  const amqp::ChannelClose close = channel_close_method(200, "bye");
  link.client(method(1, close));
  // What the client held when it closed, counted then (the observer may take some over); two
  // in hand, so neither alone.
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b2 channel_closed", "returned ch1 b3 channel_closed"}));
  ASSERT_EQ(link.observer.returned.size(), 2u);
  EXPECT_FALSE(link.observer.returned[0].context.solo);
  EXPECT_TRUE(link.observer.returned[0].context.can_take_over);
  // The broker may still deliver before the cancel-ok: the client never sees that one.
  EXPECT_EQ(link.to_broker(), decode_frames(method(1, amqp::BasicCancel{"c1", false})));
  link.broker(deliver(1, "c1", 4));
  EXPECT_EQ(link.observer.take_events(), Events{"delivery ch1 b4"});
  link.to_client();  // what the observer did not take over: the client discards it, closing
  link.broker(method(1, amqp::BasicCancelOk{"c1"}));
  EXPECT_EQ(link.broker_bytes(), method(1, close));
  broker_passes(method(1, amqp::ChannelCloseOk{}));
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b4 unseen"});
  EXPECT_EQ(link.session.channel(1), nullptr);
  ASSERT_NE(link.session.channel(2), nullptr);
  EXPECT_EQ(link.session.channel(2)->unacked_count(), 1u);
  // Reopened, channel 1 starts afresh.
  client_passes(method(1, amqp::ChannelOpen{}));
  broker_passes(method(1, amqp::ChannelOpenOk{}));
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch2 b1 connection_closed"});
}

TEST_F(SessionChannelEnd, ChannelClosedByBrokerReturnsItsUnackedAtCloseOk) {
  holding(2, 3);
  const amqp::ChannelClose close =
      channel_close_method(406, "PRECONDITION_FAILED - unknown delivery tag 9", 60, 80);
  broker_passes(method(3, close));
  EXPECT_EQ(link.observer.take_events(), Events{});
  client_passes(method(3, amqp::ChannelCloseOk{}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch3 b1 channel_closed", "returned ch3 b2 channel_closed"}));
  EXPECT_EQ(link.session.channel(3), nullptr);
  link.session.on_eof(Side::broker);
  EXPECT_EQ(link.observer.take_events(), Events{});
}

TEST_F(SessionChannelEnd, ClientEofReturnsEverythingOnceEach) {
  consume(1, "q", "c1");
  consume(2, "q", "c2");
  deliveries(2, "c2", 1, 2);
  deliveries(1, "c1", 1, 2);
  link.observer.take_events();
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b1 connection_closed", "returned ch1 b2 connection_closed",
                    "returned ch2 b1 connection_closed", "returned ch2 b2 connection_closed"}));
  EXPECT_FALSE(link.session.finished());
  link.consumers_cancelled({{1, "c1"}, {2, "c2"}});
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_EQ(link.broker_bytes(), gone_client_close());
  link.broker(method(0, amqp::ConnectionCloseOk{}));
  EXPECT_TRUE(link.session.finished());
  link.session.on_eof(Side::broker);
  link.session.on_eof(Side::client);
  link.broker(deliver(1, "c1", 3));
  EXPECT_EQ(link.observer.take_events(), Events{});
  EXPECT_TRUE(link.client_bytes().empty());
}

TEST_F(SessionChannelEnd, BrokerEofReturnsEverythingAndTellsTheClient) {
  holding(2);
  link.session.on_eof(Side::broker);
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b1 broker_lost", "returned ch1 b2 broker_lost"}));
  std::vector<WireFrame> out = link.to_client();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(out[0]).reply_code, 320);
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_TRUE(link.session.finished());
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.observer.take_events(), Events{});
}

TEST_F(SessionChannelEnd, DeliveryCutOffMidBodyIsReturned) {
  consume(1, "q", "c1");
  link.observer.take_events();
  // The observer has seen the delivery and the client its method and header; the broker
  // requeues it when the connection ends.
  link.broker(cat({method(1, deliver_method("c1", 1)), header(1, 10), body(1, "12345")}));
  EXPECT_EQ(link.observer.take_events(), Events{"delivery ch1 b1"});
  link.session.on_eof(Side::broker);
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b1 broker_lost"});
}

TEST_F(SessionChannelEnd, ClientConnectionCloseHandshake) {
  consume(1, "q", "c1");
  deliveries(1, "c1", 1, 2);
  client_passes(ack(1, 1));
  link.observer.take_events();
  const amqp::ConnectionClose close = connection_close_method(200, "Goodbye");
  link.client(method(0, close));
  EXPECT_FALSE(link.session.finished());
  // Counted at the client's close: one in hand, on the whole connection.
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b2 connection_closed"});
  ASSERT_EQ(link.observer.returned.size(), 1u);
  EXPECT_TRUE(link.observer.returned[0].context.solo);
  link.consumers_cancelled({{1, "c1"}});
  EXPECT_EQ(link.broker_bytes(), method(0, close));
  broker_passes(method(0, amqp::ConnectionCloseOk{}));
  EXPECT_EQ(link.observer.take_events(), Events{});
  // The broker side is done; the client's socket is the client's to close, as RabbitMQ
  // leaves it (issue 38: closed at once, it ended under the Go client reading its close-ok).
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));
  EXPECT_FALSE(link.session.close_after_flush(Side::client));
  link.client(method(0, amqp::ConnectionClose{}));  // whatever it sends now is dropped
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_TRUE(link.client_bytes().empty());
  link.session.on_eof(Side::broker);
  link.session.on_eof(Side::client);
  EXPECT_TRUE(link.session.finished());
  EXPECT_EQ(link.observer.take_events(), Events{});
}

TEST_F(SessionChannelEnd, AClientThatKeepsItsSocketAfterCloseOkIsClosedAfterTenSeconds) {
  link.session.on_tick(1000);
  const amqp::ConnectionClose close = connection_close_method(200);
  client_passes(method(0, close));
  broker_passes(method(0, amqp::ConnectionCloseOk{}));
  ends_after(1000, 10000);
}

// A client that answers the broker's connection.close with its TCP close, no close-ok (Bunny
// 2.19 recovering, php-amqp 1.11): the broker answers nothing more, so nothing is cancelled or
// waited for (issue 38: the proxy waited for a cancel-ok, 31 s, until the broker reset it).
TEST_F(SessionChannelEnd, ClientEofAfterTheBrokersCloseEndsAtOnce) {
  holding(1);
  const amqp::ConnectionClose close =
      connection_close_method(320, "CONNECTION_FORCED - Closed via management plugin");
  broker_passes(method(0, close));
  link.session.on_eof(Side::client);
  EXPECT_TRUE(link.broker_bytes().empty());  // no basic.cancel
  EXPECT_TRUE(link.session.finished());
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b1 connection_closed"});
  ASSERT_EQ(link.observer.returned.size(), 1u);
  EXPECT_FALSE(link.observer.returned[0].context.can_take_over);
}

TEST_F(SessionChannelEnd, BrokerConnectionCloseHandshake) {
  holding(1);
  const amqp::ConnectionClose close =
      connection_close_method(320, "CONNECTION_FORCED - broker forced connection closure");
  broker_passes(method(0, close));
  EXPECT_EQ(link.observer.take_events(), Events{});
  client_passes(method(0, amqp::ConnectionCloseOk{}));
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b1 broker_lost"});
  EXPECT_TRUE(link.session.finished());
}

}  // namespace
}  // namespace nackguard::session::test
