// A consumer's crash with deliveries in its hands (session_core_end.cpp): each is reported once,
// at the crash, and one the observer takes over keeps its close waiting (its channel.close,
// its connection.close, or, after its EOF, the broker side of the connection) until the proxy
// has settled it; the consumer is cancelled meanwhile, and what still comes is returned as
// never seen. A gone client's broker side ends with the proxy's connection.close.

#include <gtest/gtest.h>

#include "session/tracking_fixture.hpp"

namespace nackguard::session::test {
namespace {

class SessionCrashHold : public SessionTracking {
 protected:
  // The proxy acks the taken-over delivery `broker_tag` on `channel`, as it does once the
  // broker confirmed its copy.
  void ack_when_the_broker_confirms(std::uint64_t broker_tag, std::uint16_t channel = 1) {
    ASSERT_TRUE(link.session.settle_taken_over(channel, broker_tag, SettleKind::ack, false));
  }
  // The broker side of a gone client's connection ends with the proxy's connection.close,
  // after `before` (what else the proxy sent since last looked at), and the broker's close-ok.
  void ends_with_close(const Bytes& before = {}) {
    EXPECT_EQ(link.broker_bytes(), cat({before, gone_client_close()}));
    EXPECT_FALSE(link.session.finished());
    link.broker(method(0, amqp::ConnectionCloseOk{}));
    EXPECT_TRUE(link.session.finished());
  }
  static Bytes cancel(const std::string& tag) { return method(1, amqp::BasicCancel{tag, false}); }
  static Bytes cancel_ok(const std::string& tag) { return method(1, amqp::BasicCancelOk{tag}); }
};

TEST_F(SessionCrashHold, EofWithATakeoverKeepsTheBrokerSideUntilItIsSettled) {
  consume(1, "q", "c1");
  deliveries(1, "c1", 1, 1);
  link.observer.take_over_at_crash = {{1, 1}};
  link.observer.take_events();
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b1 connection_closed", "taken-over ch1 b1 <no body>"}));
  ASSERT_EQ(link.observer.returned.size(), 1u);
  EXPECT_TRUE(link.observer.returned[0].context.solo);
  EXPECT_TRUE(link.observer.returned[0].context.can_take_over);
  EXPECT_TRUE(link.session.close_after_flush(Side::client));
  EXPECT_FALSE(link.session.close_after_flush(Side::broker));
  EXPECT_EQ(link.broker_bytes(), cancel("c1"));

  // A delivery on its way before the cancel: the client never sees it.
  link.broker(deliver(1, "c1", 2));
  EXPECT_TRUE(link.client_bytes().empty());
  ack_when_the_broker_confirms(1);
  EXPECT_EQ(link.broker_bytes(), method(1, amqp::BasicAck{1, false}));
  EXPECT_FALSE(link.session.finished());  // until the cancel-ok: nothing more can come then
  link.broker(cancel_ok("c1"));
  ends_with_close();
  EXPECT_EQ(link.observer.take_events(), (Events{"delivery ch1 b2", "returned ch1 b2 unseen"}));
}

TEST_F(SessionCrashHold, AHoldEndsAfter45SecondsWithoutASettlement) {
  consume(1, "q", "c1");
  deliveries(1, "c1", 1, 2);
  link.observer.take_over_at_crash = {{1, 2}};
  link.session.on_tick(1000);
  link.session.on_eof(Side::client);
  ASSERT_EQ(link.observer.returned.size(), 2u);
  EXPECT_FALSE(link.observer.returned[0].context.solo);  // two in hand
  link.session.on_tick(1000 + 44999);
  EXPECT_FALSE(link.session.finished());
  link.observer.take_events();
  link.session.on_tick(1000 + 45000);
  ends_with_close(cancel("c1"));
  // The broker takes back the one taken over, with the connection; the other was counted at
  // the crash already.
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b2 connection_closed"});
  EXPECT_TRUE(link.observer.returned.back().delivery.taken_over);
}

TEST_F(SessionCrashHold, AChannelCloseWaitsForTheSettlement) {
  consume(1, "q", "c1");
  deliveries(1, "c1", 1, 1);
  link.observer.take_over_at_crash = {{1, 1}};
  const amqp::ChannelClose close = channel_close_method(200, "bye");
  link.client(method(1, close));
  EXPECT_EQ(link.broker_bytes(), cancel("c1"));  // the close waits
  link.broker(cancel_ok("c1"));
  EXPECT_TRUE(link.broker_bytes().empty());  // for the settlement too
  EXPECT_TRUE(link.client_bytes().empty());
  ack_when_the_broker_confirms(1);
  EXPECT_EQ(link.broker_bytes(), cat({method(1, amqp::BasicAck{1, false}), method(1, close)}));
  link.observer.take_events();
  broker_passes(method(1, amqp::ChannelCloseOk{}));
  EXPECT_EQ(link.observer.take_events(), Events{});  // counted at the close already
}

TEST_F(SessionCrashHold, AConnectionCloseWaitsForTheSettlement) {
  consume(1, "q", "c1");
  consume(2, "q", "c2");
  deliveries(2, "c2", 1, 1);
  link.observer.take_over_at_crash = {{2, 1}};
  const amqp::ConnectionClose close = connection_close_method(200, "Goodbye");
  link.client(method(0, close));
  // Every consumer of the connection is cancelled while its close waits.
  EXPECT_EQ(link.broker_bytes(), cat({cancel("c1"), method(2, amqp::BasicCancel{"c2", false})}));
  link.broker(cat({cancel_ok("c1"), method(2, amqp::BasicCancelOk{"c2"})}));
  ack_when_the_broker_confirms(1, 2);
  EXPECT_EQ(link.broker_bytes(), cat({method(2, amqp::BasicAck{1, false}), method(0, close)}));
  link.observer.take_events();
  broker_passes(method(0, amqp::ConnectionCloseOk{}));
  EXPECT_EQ(link.observer.take_events(), Events{});
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));  // the client's is the client's
}

TEST_F(SessionCrashHold, EofWithACopyAlreadyInFlightWaitsForItToo) {
  // A delivery taken over before the client saw it (its copy not yet confirmed) when the client
  // goes away: closed at once, the broker would requeue the original beside the copy.
  consume(1, "q", "c1");
  link.observer.take_over_at_delivery = {{1, 1}};
  link.broker(deliver(1, "c1", 1));
  drain();
  link.session.on_eof(Side::client);
  EXPECT_FALSE(link.session.finished());
  EXPECT_EQ(link.broker_bytes(), cancel("c1"));
  link.broker(cancel_ok("c1"));
  ack_when_the_broker_confirms(1);
  ends_with_close(method(1, amqp::BasicAck{1, false}));
}

TEST_F(SessionCrashHold, AGoneClientsBrokerSideEndsWithACloseAfterTheAcks) {
  // Ended by its socket alone, a connection may have its channels stopped at the broker
  // before the broker applied the acks just sent on it: the originals of confirmed copies
  // would come back beside them (issue 37). The close goes after the acks; nothing after it.
  consume(1, "q", "c1");
  deliveries(1, "c1", 1, 1);
  link.observer.take_over_at_crash = {{1, 1}};
  link.session.on_eof(Side::client);
  link.consumers_cancelled({{1, "c1"}});
  EXPECT_TRUE(link.broker_bytes().empty());
  ack_when_the_broker_confirms(1);
  EXPECT_EQ(link.broker_bytes(), cat({method(1, amqp::BasicAck{1, false}), gone_client_close()}));
  EXPECT_FALSE(link.session.close_after_flush(Side::broker));  // until the close-ok
  link.session.inject(Side::broker, heartbeat());
  EXPECT_TRUE(link.broker_bytes().empty());
  link.broker(method(0, amqp::ConnectionCloseOk{}));
  EXPECT_TRUE(link.session.finished());
}

TEST_F(SessionCrashHold, AGoneClientsCloseWithoutACloseOkEndsAfter10Seconds) {
  consume(1, "q", "c1");
  link.session.on_tick(1000);
  link.session.on_eof(Side::client);
  link.consumers_cancelled({{1, "c1"}});
  EXPECT_EQ(link.broker_bytes(), gone_client_close());
  ends_after(1000, 10000);
}

TEST_F(SessionCrashHold, TakenOverDeliveriesAreReturnedWhenTheChannelEnds) {
  consume(1, "q", "c1");
  link.observer.take_over_at_delivery = {{1, 2}};
  deliveries(1, "c1", 1, 3);
  link.observer.take_events();
  link.session.on_tick(0);
  // The client goes away: what it held is counted at once; the broker side waits for the one
  // taken over (session_core_end.cpp), which no settlement ends here: 45 s at most.
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b1 connection_closed", "returned ch1 b3 connection_closed"}));
  link.session.on_tick(45000);
  EXPECT_EQ(link.observer.take_events(), (Events{"returned ch1 b2 connection_closed"}));
  ends_with_close(cancel("c1"));
  EXPECT_FALSE(link.session.settle_taken_over(1, 2, SettleKind::ack, false));
}

TEST_F(SessionCrashHold, TakenOverDeliveryCutOffMidBodyIsReturnedWhenTheHoldEnds) {
  consume(1, "q", "c1");
  link.observer.take_over_at_delivery = {{1, 1}};
  link.session.on_tick(0);
  link.observer.take_events();
  link.broker(cat({method(1, deliver_method("c1", 1)), header(1, 10), body(1, "12345")}));
  EXPECT_EQ(link.observer.take_events(), Events{"delivery ch1 b1"});
  // The client goes away: the broker side stays for the rest of the body and its copy, which
  // never come here.
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.broker_bytes(), cancel("c1"));
  EXPECT_FALSE(link.session.finished());
  EXPECT_EQ(link.observer.take_events(), Events{});
  link.session.on_tick(45000);
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b1 connection_closed"});
  ends_with_close();
}

TEST_F(SessionCrashHold, NothingIsTakenOverOnAChannelTheBrokerClosed) {
  consume(1, "q", "c1");
  deliveries(1, "c1", 1, 1);
  link.observer.take_over_at_crash = {{1, 1}};
  const amqp::ChannelClose close = channel_close_method(406, "PRECONDITION_FAILED");
  broker_passes(method(1, close));
  link.observer.take_events();
  client_passes(method(1, amqp::ChannelCloseOk{}));
  ASSERT_EQ(link.observer.returned.size(), 1u);
  EXPECT_FALSE(link.observer.returned[0].context.can_take_over);
  EXPECT_TRUE(link.observer.returned[0].context.solo);
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b1 channel_closed"});
}

}  // namespace
}  // namespace nackguard::session::test
