// What an observer's call returns (ObserverActions) is carried out by the session, in order,
// once the call has returned: frames for the broker, and settlements of taken-over deliveries,
// each of which the observer hears the outcome of.

#include <gtest/gtest.h>

#include <algorithm>

#include "session/tracking_fixture.hpp"

namespace nackguard::session::test {
namespace {

constexpr std::uint16_t kReserved = 2047;  // the broker offers channel_max 2047

ObserverAction send(Bytes frames) {
  return {ObserverAction::Kind::send, std::move(frames), {}};
}
ObserverAction settle(std::uint64_t broker_tag, SettleKind kind, bool requeue = false) {
  return {ObserverAction::Kind::settle, {}, {1, broker_tag, kind, requeue}};
}

class SessionObserverActions : public SessionTracking {
 protected:
  void SetUp() override {
    SessionTracking::SetUp();
    consume(1, "q", "c1");
  }
};

TEST_F(SessionObserverActions, ATakeoverSendsAndSettlesInTheOrderReturned) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 2);
  link.observer.take_events();
  link.observer.actions = {send(method(kReserved, amqp::ChannelOpen{})),
                           settle(1, SettleKind::ack)};
  link.client(nack(1, 1, false, true));
  EXPECT_EQ(link.to_broker(), frames({method(kReserved, amqp::ChannelOpen{}), ack(1, 1)}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b1 c1 nack", "taken-over ch1 b1 <no body>",
                    "settle-written ch1 b1 written"}));
  EXPECT_EQ(link.session.channel(1)->taken_over_count(), 0u);
  // The client's other delivery is untouched: its tag is still its own.
  client_passes(ack(1, 2));
}

TEST_F(SessionObserverActions, ASettleTheSessionCannotSendIsToldAsNotSent) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 1);
  link.observer.take_events();
  // The second settlement of the same delivery finds it settling already; tag 9 is unknown.
  link.observer.actions = {settle(1, SettleKind::reject), settle(1, SettleKind::ack),
                           settle(9, SettleKind::ack)};
  link.client(nack(1, 1, false, true));
  EXPECT_EQ(link.to_broker(), frames({reject(1, 1, false)}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b1 c1 nack", "taken-over ch1 b1 <no body>",
                    "settle-written ch1 b1 written", "settle-written ch1 b1 not written",
                    "settle-written ch1 b9 not written"}));
}

TEST_F(SessionObserverActions, FramesFromTheProxyChannelsHandlerGoToTheBroker) {
  link.observer.actions = {send(method(kReserved, amqp::ConfirmSelect{false}))};
  link.broker(method(kReserved, amqp::ChannelOpenOk{}));
  EXPECT_EQ(link.to_broker(), frames({method(kReserved, amqp::ConfirmSelect{false})}));
  EXPECT_TRUE(link.to_client().empty());
  EXPECT_TRUE(link.observer.actions.empty());
}

// A settlement returned while the client is in the middle of a publish waits for its last body
// frame: the observer hears that it was written only then.
class SessionSettleInContent : public SessionObserverActions {
 protected:
  void SetUp() override {
    SessionObserverActions::SetUp();
    link.observer.take_over = {{1, 1}};
    deliveries(1, "c1", 1, 1);
    link.client(nack(1, 1, false, true));
    amqp::BasicPublish publish;
    publish.routing_key = "elsewhere";
    client_passes(cat({method(1, publish), header(1, 6), body(1, "abc")}));
    link.observer.take_events();
    // The guard's ack of the original, once the broker confirmed its copy.
    link.observer.actions = {settle(1, SettleKind::ack)};
    link.broker(method(kReserved, amqp::ChannelOpenOk{}));
    EXPECT_TRUE(link.to_broker().empty());
    EXPECT_EQ(link.observer.take_events(), Events{"proxy-frame ch2047 type1"});
  }
};

TEST_F(SessionSettleInContent, IsWrittenAfterTheClientsLastBodyFrame) {
  link.client(body(1, "def"));
  EXPECT_EQ(link.to_broker(), frames({body(1, "def"), ack(1, 1)}));
  EXPECT_EQ(link.observer.take_events(), Events{"settle-written ch1 b1 written"});
}

// The broker closes the channel first: the ack is dropped, and the broker requeues the original.
// Booked as written, it would have counted a dead-letter that never happened.
TEST_F(SessionSettleInContent, ABrokerChannelCloseDropsItAndTellsTheObserver) {
  amqp::ChannelClose close;
  close.reply_code = 406;
  close.reply_text = "PRECONDITION_FAILED - unknown delivery tag 7";
  link.broker(method(1, close));
  const std::vector<std::string> events = link.observer.take_events();
  EXPECT_EQ(std::count(events.begin(), events.end(), "settle-written ch1 b1 not written"), 1)
      << ::testing::PrintToString(events);
  link.client(body(1, "def"));
  EXPECT_EQ(link.to_broker(), frames({body(1, "def")}));
  EXPECT_TRUE(link.observer.take_events().empty());
}

}  // namespace
}  // namespace nackguard::session::test
