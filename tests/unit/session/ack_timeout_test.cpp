// The policy's ack_timeout: a delivery the client holds unacked too long gets its channel
// closed by the proxy on both sides (406 to the client); only that delivery counts a return.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"
#include "session/tracking_fixture.hpp"

namespace nackguard::session {
namespace {

class SessionAckTimeout : public test::SessionTracking {
 protected:
  void SetUp() override {
    SessionTracking::SetUp();
    link.observer.ack_timeout = 5000;
    link.session.on_tick(1000);  // the session's clock starts
    consume(1, "q", "c1");
  }
  // The close the proxy sent to `frames`' side on channel 1, decoded.
  static amqp::ChannelClose close_in(const std::vector<test::WireFrame>& frames) {
    EXPECT_EQ(frames.size(), 1u);
    if (frames.size() != 1) return {};
    return test::decode_as<amqp::ChannelClose>(frames[0]);
  }
};

TEST_F(SessionAckTimeout, ClosesBothSidesAndCountsOnlyTheOldest) {
  deliveries(1, "c1", 1, 3);
  client_passes(test::ack(1, 1));
  link.observer.take_events();
  link.session.on_tick(5999);
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.broker_bytes().empty());

  link.session.on_tick(6000);
  const amqp::ChannelClose to_client = close_in(link.to_client());
  EXPECT_EQ(to_client.reply_code, 406);
  EXPECT_NE(to_client.reply_text.find("delivery tag 2 from queue 'q' unacked for 5000 ms"),
            std::string::npos)
      << to_client.reply_text;
  EXPECT_EQ(close_in(link.to_broker()).reply_code, 200);
  EXPECT_EQ(link.observer.take_events(), (test::Events{"ack-timeout ch1 b2 held 5000"}));

  // Until both close-oks are in, the channel's frames go nowhere.
  link.broker(test::deliver(1, "c1", 4));
  link.client(test::ack(1, 3));
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.broker_bytes().empty());
  link.broker(test::method(1, amqp::ChannelCloseOk{}));
  link.client(test::method(1, amqp::ChannelCloseOk{}));
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_EQ(link.observer.take_events(),
            (test::Events{"returned ch1 b2 consumer_timeout", "returned ch1 b3 broker_lost"}));
  EXPECT_EQ(link.session.channel(1), nullptr);
}

TEST_F(SessionAckTimeout, TheClientsReopenWaitsForTheBrokersCloseOk) {
  deliveries(1, "c1", 1, 1);
  link.session.on_tick(6000);
  drain();
  link.client(test::method(1, amqp::ChannelCloseOk{}));
  const amqp::Bytes reopen = test::method(1, amqp::ChannelOpen{});
  link.client(reopen);
  EXPECT_TRUE(link.broker_bytes().empty()) << "channel.open before the broker's close-ok";
  link.broker(test::method(1, amqp::ChannelCloseOk{}));
  EXPECT_EQ(link.broker_bytes(), reopen);
  broker_passes(test::method(1, amqp::ChannelOpenOk{}));
  consume(1, "q", "c2");
  deliveries(1, "c2", 1, 1);
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 1u);
}

TEST_F(SessionAckTimeout, AClientClosingAtTheSameTimeIsAnswered) {
  deliveries(1, "c1", 1, 1);
  link.session.on_tick(6000);
  drain();
  link.observer.take_events();
  const amqp::ChannelClose close = test::channel_close_method(200);
  link.client(test::method(1, close));
  EXPECT_EQ(link.to_client(), test::frames({test::method(1, amqp::ChannelCloseOk{})}));
  link.broker(test::method(1, amqp::ChannelCloseOk{}));
  // The client's close-ok for the proxy's close comes after: dropped, not sent on.
  link.client(test::method(1, amqp::ChannelCloseOk{}));
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_EQ(link.observer.take_events(), (test::Events{"returned ch1 b1 consumer_timeout"}));
}

TEST_F(SessionAckTimeout, DeliveriesBeforeTheFirstTickAreTimedFromIt) {
  test::Link fresh;
  test::handshake(fresh);
  fresh.observer.ack_timeout = 5000;
  fresh.client(test::method(1, test::consume_method("q", "c1")));
  fresh.broker(test::method(1, amqp::BasicConsumeOk{"c1"}));
  fresh.broker(test::deliver(1, "c1", 1));
  fresh.client_bytes();
  fresh.broker_bytes();
  fresh.session.on_tick(100000);
  fresh.session.on_tick(104999);
  EXPECT_TRUE(fresh.client_bytes().empty());
  fresh.session.on_tick(105000);
  EXPECT_EQ(fresh.to_client().size(), 1u);
}

TEST_F(SessionAckTimeout, OffOrAckedInTimeNothingHappens) {
  deliveries(1, "c1", 1, 2);
  client_passes(test::ack(1, 1));
  link.session.on_tick(5000);
  client_passes(test::ack(1, 2));
  link.session.on_tick(60000);
  link.observer.ack_timeout = 0;
  deliveries(1, "c1", 3, 3);
  link.session.on_tick(600000);
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.broker_bytes().empty());
}

using namespace guard_test;

class GuardAckTimeout : public GuardTest {};

// max_redeliveries 1, ack_timeout 5 s: the poison's second timeout passes the limit; at its
// next delivery it is dead-lettered with reason consumer_timeout. The innocent message handed
// out behind it each time is never counted.
TEST_F(GuardAckTimeout, PoisonIsDeadLetteredAndTheInnocentIsNotCounted) {
  retry::Policy p = policy(1);
  p.ack_timeout = retry::Millis(5000);
  start(p);
  const Message poison = message("p"), innocent = message("i");
  std::int64_t now = 1000;
  for (int timeout = 1; timeout <= 2; ++timeout) {
    conn->session.on_tick(now);
    deliver_passes(delivery(1, poison, timeout > 1));
    broker(delivery(2, innocent, timeout > 1));
    to_client();
    now += 5000;
    conn->session.on_tick(now);
    to_client();
    to_broker();
    broker(method(kCh, amqp::ChannelCloseOk{}));
    client(method(kCh, amqp::ChannelCloseOk{}));
    EXPECT_TRUE(to_broker().empty());
    EXPECT_EQ(tracked("p")->returns, static_cast<std::uint32_t>(timeout));
    // Not counted: its entry, if any, only knows that its redelivered flag stands for nothing.
    EXPECT_TRUE(!tracked("i") || (tracked("i")->returns == 0 && !tracked("i")->crash_suspect &&
                                  tracked("i")->uncounted_redelivery))
        << "the innocent message was counted";
    open_and_consume();
  }
  EXPECT_EQ(listener.returns, 2);
  EXPECT_EQ(listener.ack_timeouts, 2);
  Copy copy = dead_letter_at_next_delivery(1, poison);
  EXPECT_EQ(copy.header_text("x-nackguard-reason"),
            text(amqp::FieldValue::string("consumer_timeout")));
}

}  // namespace
}  // namespace nackguard::session
