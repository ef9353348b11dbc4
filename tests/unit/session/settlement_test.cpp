// The client's acks, nacks, rejects and recovers: each delivery is settled or given back
// exactly once, and the frames pass as they are while the tags are the broker's.

#include <gtest/gtest.h>

#include "session/tracking_fixture.hpp"

namespace nackguard::session::test {
namespace {

class SessionSettlement : public SessionTracking {
 protected:
  // `all` (tag 0, multiple) settles b5, the last delivery outstanding on channel 1, as `how`;
  // then `side`'s EOF has nothing left to return: each was reported once.
  void settles_the_last(const Bytes& all, const std::string& how, Side side) {
    client_passes(all);
    EXPECT_EQ(link.observer.take_events(), Events{"settled ch1 b5 c5 " + how});
    EXPECT_EQ(link.session.channel(1)->unacked_count(), 0u);
    link.session.on_eof(side);
    EXPECT_EQ(link.observer.take_events(), Events{});
  }
};

TEST_F(SessionSettlement, AckSingleSettlesOnceAndPassesAsItIs) {
  holding(3);
  client_passes(ack(1, 2));
  client_passes(ack(1, 2));  // again: the broker decides; nothing more to report
  EXPECT_EQ(link.observer.take_events(), Events{"settled ch1 b2 c2 ack"});
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 2u);
  ASSERT_EQ(link.observer.settled.size(), 1u);
  EXPECT_EQ(link.observer.settled[0].delivery.queue, "q");
}

TEST_F(SessionSettlement, AckMultipleSettlesEveryTagUpToIt) {
  consume(1, "q", "c1");
  deliveries(1, "c1", 1, 5);
  client_passes(ack(1, 2));
  link.observer.take_events();
  client_passes(ack(1, 4, true));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"settled ch1 b1 c1 ack", "settled ch1 b3 c3 ack", "settled ch1 b4 c4 ack"}));
  settles_the_last(ack(1, 0, true), "ack", Side::broker);
}

TEST_F(SessionSettlement, NackWithRequeueIsAClientReturnAndWithoutASettlement) {
  holding(5);
  client_passes(nack(1, 1, false, true));
  client_passes(nack(1, 2, false, false));
  client_passes(nack(1, 4, true, true));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b1 c1 nack", "settled ch1 b2 c2 nack",
                    "client-return ch1 b3 c3 nack", "client-return ch1 b4 c4 nack"}));
  settles_the_last(nack(1, 0, true, false), "nack", Side::client);
}

TEST_F(SessionSettlement, RejectWithRequeueIsAClientReturnAndWithoutASettlement) {
  holding(2);
  client_passes(reject(1, 2, true));
  client_passes(reject(1, 1, false));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b2 c2 reject", "settled ch1 b1 c1 reject"}));
  ASSERT_EQ(link.observer.client_returns.size(), 1u);
  EXPECT_EQ(link.observer.client_returns[0].cause, ReturnCause::reject);
  EXPECT_EQ(link.observer.client_returns[0].delivery.broker_tag, 2u);
  EXPECT_EQ(link.observer.client_returns[0].delivery.queue, "q");
  EXPECT_TRUE(link.observer.returned.empty());
}

TEST_F(SessionSettlement, RecoverWithRequeueReturnsEveryUnacked) {
  consume(1, "q", "c1");
  deliveries(1, "c1", 1, 3);
  client_passes(ack(1, 2));
  link.observer.take_events();
  int batches = link.observer.returns_done;
  client_passes(method(1, amqp::BasicRecover{true}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b1 recover", "returned ch1 b3 recover"}));
  EXPECT_EQ(link.observer.returns_done, batches + 1);
  broker_passes(method(1, amqp::BasicRecoverOk{}));
  // The broker sends them again under new tags; only those are outstanding now.
  deliveries(1, "c1", 4, 5);
  link.observer.take_events();
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b4 connection_closed", "returned ch1 b5 connection_closed"}));
}

TEST_F(SessionSettlement, RecoverAsyncWithRequeueReturnsEveryUnacked) {
  holding(2);
  Bytes recover_async;
  amqp::append_fixed_method_frame(recover_async, 1, amqp::BasicRecoverAsync{{true}});
  client_passes(recover_async);
  EXPECT_EQ(link.observer.take_events(),
            (Events{"returned ch1 b1 recover", "returned ch1 b2 recover"}));
}

TEST_F(SessionSettlement, RecoverWithoutRequeueReturnsNothing) {
  holding(2);
  client_passes(method(1, amqp::BasicRecover{false}));
  EXPECT_EQ(link.observer.take_events(), Events{});
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 2u);
}

}  // namespace
}  // namespace nackguard::session::test
