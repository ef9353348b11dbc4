// RabbitMQ's consumer_timeout closes a channel with 406 when its oldest unacked delivery has
// waited too long, and requeues every delivery of the channel. Only that delivery counts a
// return (consumer_timeout); the others are no consumer's doing.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"
#include "session/tracking_fixture.hpp"

namespace nackguard::session {
namespace {

// What RabbitMQ 3.10 and 4.0 send (rabbit_channel).
amqp::ChannelClose timeout_close(std::uint16_t channel = 1) {
  return test::channel_close_method(
      406, "PRECONDITION_FAILED - delivery acknowledgement on channel " + std::to_string(channel) +
               " timed out. Timeout value used: 5000 ms. This timeout value "
               "can be configured, see consumers doc guide to learn more");
}

class SessionConsumerTimeout : public test::SessionTracking {};

TEST_F(SessionConsumerTimeout, OnlyTheOldestUnackedIsTheConsumersDoing) {
  consume(1, "q", "c1");
  deliveries(1, "c1", 1, 4);
  client_passes(test::ack(1, 1));
  link.observer.take_events();
  broker_passes(test::method(1, timeout_close()));
  client_passes(test::method(1, amqp::ChannelCloseOk{}));
  EXPECT_EQ(link.observer.take_events(),
            (test::Events{"returned ch1 b2 consumer_timeout", "returned ch1 b3 broker_lost",
                          "returned ch1 b4 broker_lost"}));
}

// RabbitMQ times out the delivery it handed out first: when that is one the proxy holds
// (taken over, its settlement not yet written), no consumer is to blame and nothing counts.
TEST_F(SessionConsumerTimeout, TheProxysOwnOldestDeliveryBlamesNoConsumer) {
  consume(1, "q", "c1");
  link.observer.take_over_at_delivery = {{1, 1}};
  deliveries(1, "c1", 1, 3);  // broker tag 1 taken over; 2 and 3 are client tags 1 and 2
  link.observer.take_events();
  link.broker(test::method(1, timeout_close()));
  drain();
  link.client(test::method(1, amqp::ChannelCloseOk{}));
  drain();
  EXPECT_EQ(link.observer.take_events(),
            (test::Events{"returned ch1 b2 broker_lost", "returned ch1 b3 broker_lost",
                          "returned ch1 b1 broker_lost"}));
}

TEST_F(SessionConsumerTimeout, AnotherPreconditionFailedStillCountsEveryDelivery) {
  holding(2);
  broker_passes(test::method(
      1, test::channel_close_method(406, "PRECONDITION_FAILED - unknown delivery tag 9")));
  client_passes(test::method(1, amqp::ChannelCloseOk{}));
  EXPECT_EQ(link.observer.take_events(),
            (test::Events{"returned ch1 b1 channel_closed", "returned ch1 b2 channel_closed"}));
}

using namespace guard_test;

class GuardConsumerTimeout : public GuardTest {};

// max_redeliveries 1: the poison's second timeout passes the limit; it is dead-lettered with
// reason consumer_timeout at its next delivery, and the innocent message held with it each
// time is never counted.
TEST_F(GuardConsumerTimeout, PoisonIsDeadLetteredAndTheInnocentIsNotCounted) {
  start(policy(1));
  const Message poison = message("p"), innocent = message("i");
  for (int timeout = 1; timeout <= 2; ++timeout) {
    deliver_passes(delivery(1, poison, timeout > 1));
    broker(delivery(2, innocent, timeout > 1));
    to_client();
    broker(method(kCh, timeout_close()));
    to_client();
    client(method(kCh, amqp::ChannelCloseOk{}));
    to_broker();
    EXPECT_EQ(tracked("p")->returns, static_cast<std::uint32_t>(timeout));
    // Not counted: its entry, if any, only knows that its redelivered flag stands for nothing.
    EXPECT_TRUE(!tracked("i") || (tracked("i")->returns == 0 && !tracked("i")->crash_suspect &&
                                  tracked("i")->uncounted_redelivery))
        << "the innocent message was counted";
    open_and_consume();  // the client opens the channel again and consumes
  }
  EXPECT_EQ(listener.returns, 2);
  Copy copy = dead_letter_at_next_delivery(1, poison);  // the third delivery
  EXPECT_EQ(copy.header_text("x-nackguard-reason"),
            text(amqp::FieldValue::string("consumer_timeout")));
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1)}));
  EXPECT_EQ(listener.dead_letters,
            (std::vector<Dl>{{"q", "message_id:p", 2, retry::DeadLetterReason::consumer_timeout}}));
}

// RabbitMQ 4.3 times out a quorum queue's consumer with a basic.cancel (the channel stays
// open) and requeues what it held: the oldest is the one that timed out, the others count
// nothing. The client still holds them: their settlements, or its close, are no returns any
// more, and nothing is taken over at its close (the broker has them back: a copy would be a
// duplicate).
TEST_F(GuardConsumerTimeout, FourDotThreesCancelCountsTheOldestAlone) {
  broker_version = "4.3.6";
  start(policy(1));
  const Message poison = message("p"), innocent = message("i");
  const Bytes close = method(kCh, amqp::ChannelClose{200, "bye", 0, 0});
  deliver_passes(delivery(1, poison));
  deliver_passes(delivery(2, innocent));
  deliver_passes(method(kCh, amqp::BasicCancel{kConsumer, true}));
  EXPECT_EQ(tracked("p")->returns, 1u);
  EXPECT_TRUE(!tracked("i") || tracked("i")->returns == 0) << "the innocent was counted";
  client_passes(ack(kCh, 2));  // void at the broker, and no return here
  client_passes(close);        // no consumer left to cancel: at once, and nothing taken over
  deliver_passes(method(kCh, amqp::ChannelCloseOk{}));
  EXPECT_EQ(listener.returns, 1);
  // Redelivered, alone (a suspect), it times out again: past max_redeliveries 1.
  open_and_consume();
  deliver_passes(delivery(1, poison, true));
  deliver_passes(method(kCh, amqp::BasicCancel{kConsumer, true}));
  EXPECT_EQ(tracked("p")->returns, 2u);
  client_passes(close);
  deliver_passes(method(kCh, amqp::ChannelCloseOk{}));
  EXPECT_EQ(listener.returns, 2);
  EXPECT_TRUE(listener.dead_letters.empty());
  open_and_consume();
  Copy copy = dead_letter_at_next_delivery(1, poison);
  EXPECT_EQ(copy.header_text("x-nackguard-reason"),
            text(amqp::FieldValue::string("consumer_timeout")));
}

// Before 4.3 a broker's basic.cancel (the queue deleted) requeues nothing: nothing counts.
TEST_F(GuardConsumerTimeout, AnEarlierBrokersCancelCountsNothing) {
  broker_version = "4.0.5";
  start(policy(1));
  deliver_passes(delivery(1, message("p")));
  deliver_passes(method(kCh, amqp::BasicCancel{kConsumer, true}));
  EXPECT_EQ(listener.returns, 0);
  client_passes(ack(kCh, 1));
  EXPECT_FALSE(tracked("p"));
}

}  // namespace
}  // namespace nackguard::session
