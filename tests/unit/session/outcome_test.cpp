// A TakeOver the observer returns is carried out by the session: its copy published on the
// proxy's channel, whose frames are the session's own; the copy's outcome handed back to the
// observer at a moment the settlement it returns can be written at once; dropped unheard when
// the delivery is no longer the proxy's.

#include <gtest/gtest.h>

#include "session/tracking_fixture.hpp"

namespace nackguard::session::test {
namespace {

constexpr std::uint16_t kReserved = 2047;  // the broker offers channel_max 2047

class SessionOutcome : public SessionTracking {
 protected:
  void SetUp() override {
    SessionTracking::SetUp();
    consume(1, "q", "c1");
    link.observer.copies = true;
  }

  // The proxy's channel opens and selects confirms; the copy waiting for it is published.
  void open_proxy_channel() {
    EXPECT_EQ(link.to_broker(), frames({method(kReserved, amqp::ChannelOpen{})}));
    link.broker(method(kReserved, amqp::ChannelOpenOk{}));
    EXPECT_EQ(link.to_broker(), frames({method(kReserved, amqp::ConfirmSelect{false})}));
    link.broker(method(kReserved, amqp::ConfirmSelectOk{}));
    amqp::BasicPublish publish;
    publish.routing_key = "copies";
    publish.mandatory = true;
    // The publish and its content header: the copy's body is empty (none was retained).
    const std::vector<WireFrame> sent = link.to_broker();
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(sent[0], frames({method(kReserved, publish)})[0]);
    EXPECT_EQ(sent[1].type, static_cast<std::uint8_t>(FrameType::header));
    EXPECT_EQ(sent[1].channel, kReserved);
  }
  Bytes confirm(std::uint64_t tag) {
    amqp::BasicAck ack;
    ack.delivery_tag = tag;
    return method(kReserved, ack);
  }
};

TEST_F(SessionOutcome, ACopyConfirmedHasTheObserverSettleTheOriginal) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 2);
  link.observer.take_events();
  link.client(nack(1, 1, false, true));
  open_proxy_channel();
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b1 c1 nack", "taken-over ch1 b1 <no body>"}));
  EXPECT_EQ(link.session.copies_outstanding(), 1u);
  link.broker(confirm(1));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 1)}));
  EXPECT_TRUE(link.to_client().empty());
  EXPECT_EQ(link.observer.take_events(), Events{"outcome ch1 b1 none"});
  EXPECT_EQ(link.session.channel(1)->taken_over_count(), 0u);
  EXPECT_EQ(link.session.copies_outstanding(), 0u);
  // The client's other delivery is untouched: its tag is still its own.
  client_passes(ack(1, 2));
}

TEST_F(SessionOutcome, ACopyRefusedGivesTheOriginalBackAsTheConsumerAsked) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 1);
  link.client(reject(1, 1));
  open_proxy_channel();
  link.observer.take_events();
  amqp::BasicNack refused;
  refused.delivery_tag = 1;
  link.broker(method(kReserved, refused));
  EXPECT_EQ(link.to_broker(), frames({reject(1, 1)}));
  EXPECT_EQ(link.observer.take_events(), Events{"outcome ch1 b1 republish_failed"});
}

TEST_F(SessionOutcome, TheProxyChannelsFramesReachNeitherTheClientNorTheObserver) {
  link.observer.take_events();
  link.broker(method(kReserved, amqp::ChannelOpenOk{}));
  EXPECT_EQ(link.to_broker(), frames({method(kReserved, amqp::ConfirmSelect{false})}));
  EXPECT_TRUE(link.to_client().empty());
  EXPECT_TRUE(link.observer.take_events().empty());
}

// A copy confirmed while the client is in the middle of a publish: its outcome waits for the
// client's last body frame, so that the settlement is written as the observer books it.
class SessionOutcomeInContent : public SessionOutcome {
 protected:
  void SetUp() override {
    SessionOutcome::SetUp();
    link.observer.take_over = {{1, 1}};
    deliveries(1, "c1", 1, 1);
    link.client(nack(1, 1, false, true));
    open_proxy_channel();
    amqp::BasicPublish publish;
    publish.routing_key = "elsewhere";
    client_passes(cat({method(1, publish), header(1, 6), body(1, "abc")}));
    link.observer.take_events();
    link.broker(confirm(1));
    EXPECT_TRUE(link.to_broker().empty());
    EXPECT_TRUE(link.observer.take_events().empty());
    EXPECT_EQ(link.session.copies_outstanding(), 1u);
  }
};

TEST_F(SessionOutcomeInContent, IsHandedBackAfterTheClientsLastBodyFrame) {
  link.client(body(1, "def"));
  EXPECT_EQ(link.to_broker(), frames({body(1, "def"), ack(1, 1)}));
  EXPECT_EQ(link.observer.take_events(), Events{"outcome ch1 b1 none"});
}

// The broker closes the channel first and requeues the original: the outcome is dropped, and
// the observer books nothing (a dead-letter booked there would never have happened).
TEST_F(SessionOutcomeInContent, ABrokerChannelCloseDropsItUnheard) {
  const amqp::ChannelClose close =
      channel_close_method(406, "PRECONDITION_FAILED - unknown delivery tag 7");
  link.broker(method(1, close));
  link.observer.take_events();
  link.client(body(1, "def"));
  EXPECT_EQ(link.to_broker(), frames({body(1, "def")}));
  EXPECT_TRUE(link.observer.take_events().empty());
  EXPECT_TRUE(link.observer.outcomes.empty());
  EXPECT_EQ(link.session.copies_outstanding(), 0u);
}

}  // namespace
}  // namespace nackguard::session::test
