// What an observer's call returns (ObserverActions) is carried out by the session, in order,
// once the call has returned: frames for the broker, and settlements of taken-over deliveries,
// each of which the observer hears the outcome of.

#include <gtest/gtest.h>

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
                    "settle-applied ch1 b1 sent"}));
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
                    "settle-applied ch1 b1 sent", "settle-applied ch1 b1 not sent",
                    "settle-applied ch1 b9 not sent"}));
}

TEST_F(SessionObserverActions, FramesFromTheProxyChannelsHandlerGoToTheBroker) {
  link.observer.actions = {send(method(kReserved, amqp::ConfirmSelect{false}))};
  link.broker(method(kReserved, amqp::ChannelOpenOk{}));
  EXPECT_EQ(link.to_broker(), frames({method(kReserved, amqp::ConfirmSelect{false})}));
  EXPECT_TRUE(link.to_client().empty());
  EXPECT_TRUE(link.observer.actions.empty());
}

}  // namespace
}  // namespace nackguard::session::test
