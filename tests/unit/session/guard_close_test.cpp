// A client closes a channel while a delivery on it is taken over and its copy awaits the
// broker's confirm: the close waits for the settlement, so that the original is acked (or
// given back) before the broker closes the channel. Seen on 4.0.5 (test_redelivery's test_i):
// forwarded at once, the close handed the original back, the copy became a duplicate, and the
// ack that followed the confirm was a frame on a closed channel, which ended the connection.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

class GuardClose : public GuardTest {
 protected:
  // On 4.0.5, a delivery at x-delivery-count 20 is republished before the consumer sees it.
  void take_over_at_the_limit() {
    broker_version = "4.0.5";
    start(policy(30));
    broker(delivery(1, with_delivery_count(message("m1"), 20), true));
    ASSERT_TRUE(client_bytes().empty());
    take_copy(open_proxy_channel());  // the copy, published without a declaration
  }
  static Bytes channel_close() { return method(kCh, amqp::ChannelClose{200, "bye", 0, 0}); }
};

TEST_F(GuardClose, TheClientsCloseWaitsForTheConfirmAndFollowsTheAck) {
  take_over_at_the_limit();
  client(channel_close());
  EXPECT_TRUE(crash_hold_start().empty());  // the consumer cancelled, the close held
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1), channel_close()}));
  broker(method(kCh, amqp::ChannelCloseOk{}));
  EXPECT_EQ(to_client(), frames({method(kCh, amqp::ChannelCloseOk{})}));
  EXPECT_EQ(listener.requeues, std::vector<retry::Action>{retry::Action::republish});
}

TEST_F(GuardClose, ARefusedCopyGivesTheOriginalBackThenCloses) {
  take_over_at_the_limit();
  client(channel_close());
  EXPECT_TRUE(crash_hold_start().empty());
  refuse(1);
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1), channel_close()}));
}

// The consumer is cancelled first, so that nothing reaches the channel while it closes; the
// close follows the cancel-ok, which the client, closing, never sees.
TEST_F(GuardClose, WithoutATakeoverTheCloseFollowsTheCancelOk) {
  start(policy(30));
  deliver_passes(delivery(1, message("m1")));
  client(channel_close());
  EXPECT_EQ(to_broker(), frames({cancel_consumer()}));
  broker(method(kCh, amqp::BasicCancelOk{kConsumer}));
  EXPECT_EQ(to_broker(), frames({channel_close()}));
  EXPECT_TRUE(client_bytes().empty());
}

TEST_F(GuardClose, AHeldCloseGoesAfterTheBoundEvenWithoutASettlement) {
  take_over_at_the_limit();
  client(channel_close());
  EXPECT_TRUE(crash_hold_start().empty());
  conn->session.on_tick(now);
  EXPECT_TRUE(broker_bytes().empty());
  conn->session.on_tick(now + 44999);
  EXPECT_TRUE(broker_bytes().empty());
  conn->session.on_tick(now + 45000);
  std::vector<Wire> sent = to_broker();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent.back(), decode_frames(channel_close()).front());
}

TEST_F(GuardClose, TheBrokersCloseCrossingItDropsTheHeldOne) {
  take_over_at_the_limit();
  client(channel_close());
  broker(method(kCh, amqp::ChannelClose{406, "PRECONDITION_FAILED", 0, 0}));
  confirm(1);
  client(method(kCh, amqp::ChannelCloseOk{}));
  // No ack on the closing channel, and the client's close never follows the broker's.
  EXPECT_EQ(to_broker(), frames({cancel_consumer(), method(kCh, amqp::ChannelCloseOk{})}));
}

}  // namespace
}  // namespace nackguard::session::guard_test
