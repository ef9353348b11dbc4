// Channels in transaction mode (tx.select): what a rollback gives back, when a taken-over
// requeue is carried out, and the client frames that wait behind a commit the proxy holds.

#include <gtest/gtest.h>

#include "session/tracking_fixture.hpp"

namespace nackguard::session::test {
namespace {

class SessionTx : public SessionTracking {
 protected:
  void SetUp() override {
    SessionTracking::SetUp();
    consume(1, "q", "c1");
    client_passes(tx_select());
    link.observer.take_events();
  }
  std::vector<WireFrame> client_sends(const Bytes& bytes) {
    link.client(bytes);
    return link.to_broker();
  }
};

TEST_F(SessionTx, AckRolledBackIsTheClientsAgainUnderItsTag) {
  link.observer.take_over_at_delivery = {{1, 2}};
  deliveries(1, "c1", 1, 3);  // client tags 1, 2 are broker tags 1, 3
  link.observer.take_events();
  EXPECT_EQ(client_sends(ack(1, 2)), frames({ack(1, 3)}));
  // Settled only once committed: nothing reported yet.
  EXPECT_EQ(link.observer.take_events(), Events{});
  client_passes(tx_rollback());
  // The broker has tag 3 unacked again: the client's ack of it is no unknown tag.
  EXPECT_EQ(client_sends(ack(1, 2)), frames({ack(1, 3)}));
  client_passes(tx_commit());
  EXPECT_EQ(link.observer.take_events(), Events{"settled ch1 b3 c2 ack"});
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 1u);
}

TEST_F(SessionTx, UncommittedAckIsReturnedWhenTheChannelEnds) {
  deliveries(1, "c1", 1, 2);
  client_passes(ack(1, 1));
  client_passes(tx_commit());
  client_passes(ack(1, 2));
  link.observer.take_events();
  link.session.on_eof(Side::client);
  link.consumers_cancelled({{1, "c1"}});
  // The broker requeues what was acked after the last commit.
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b2 connection_closed"});
}

TEST_F(SessionTx, TakeoverIsCarriedOutAtTheCommitAndTheCommitWaitsForIt) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 2);
  link.observer.take_events();
  EXPECT_EQ(client_sends(nack(1, 1, false, true)), frames({}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b1 c1 nack", "taken-over ch1 b1 <no body>"}));
  EXPECT_EQ(client_sends(ack(1, 2)), frames({ack(1, 2)}));
  // Decided, and not carried out yet: no outcome can come before the commit.
  EXPECT_TRUE(link.observer.outcomes.empty());
  // The commit: the proxy's copy may now be published; the commit waits for its settlement.
  EXPECT_EQ(client_sends(tx_commit()), frames({}));
  EXPECT_EQ(link.observer.take_events(), Events{"settled ch1 b2 c2 ack"});
  EXPECT_EQ(link.observer.outcomes.size(), 1u);
  ASSERT_TRUE(link.session.settle_taken_over(1, 1, SettleKind::ack, false));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 1), tx_commit()}));
  broker_passes(tx_commit_ok());
  // Committed: a rollback now has nothing of the proxy's to write again.
  EXPECT_EQ(client_sends(tx_rollback()), frames({tx_rollback()}));
}

TEST_F(SessionTx, RollbackDropsAPendingTakeoverAndTheTagIsTheClientsAgain) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 1);
  link.observer.take_events();
  EXPECT_EQ(client_sends(nack(1, 1, false, true)), frames({}));
  EXPECT_EQ(client_sends(tx_rollback()), frames({tx_rollback()}));
  EXPECT_EQ(link.observer.take_events(),
            (Events{"client-return ch1 b1 c1 nack", "taken-over ch1 b1 <no body>"}));
  EXPECT_EQ(link.session.channel(1)->taken_over_count(), 0u);
  EXPECT_FALSE(link.session.settle_taken_over(1, 1, SettleKind::ack, false));
  EXPECT_EQ(client_sends(ack(1, 1)), frames({ack(1, 1)}));
  EXPECT_EQ(client_sends(tx_commit()), frames({tx_commit()}));
  EXPECT_EQ(link.observer.take_events(), Events{"settled ch1 b1 c1 ack"});
  // The TakeOver the rollback dropped was never carried out.
  EXPECT_TRUE(link.observer.outcomes.empty());
}

TEST_F(SessionTx, FallbackNackGoesBeforeTheCommit) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 1);
  link.client(nack(1, 1, false, true));
  link.client(tx_commit());
  EXPECT_EQ(link.to_broker(), frames({}));
  ASSERT_TRUE(link.session.settle_taken_over(1, 1, SettleKind::nack, true));
  EXPECT_EQ(link.to_broker(), frames({nack(1, 1, false, true), tx_commit()}));
}

TEST_F(SessionTx, FramesBehindAHeldCommitWaitInOrder) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 2);
  link.client(nack(1, 1, false, true));
  link.client(tx_commit());
  amqp::BasicPublish publish;
  publish.routing_key = "out";
  Bytes behind = cat({method(1, publish), content(1, "data"), ack(1, 2), tx_commit()});
  link.client(behind);
  // Another channel is not held.
  Bytes other = method(3, amqp::ChannelOpen{});
  link.client(other);
  EXPECT_EQ(link.to_broker(), decode_frames(other));
  ASSERT_TRUE(link.session.settle_taken_over(1, 1, SettleKind::ack, false));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 1), tx_commit()}));
  // Handled at the next frame from either side, or the next tick: never inside a callback.
  Bytes more = tx_rollback();
  link.client(more);
  EXPECT_EQ(link.to_broker(), frames({behind, more}));
}

TEST_F(SessionTx, CommitWaitsForAContentSequenceOnAnotherChannel) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 1);
  link.client(nack(1, 1, false, true));
  link.client(tx_commit());
  amqp::BasicPublish publish;
  link.client(cat({method(2, publish), header(2, 4)}));
  link.broker_bytes();
  ASSERT_TRUE(link.session.settle_taken_over(1, 1, SettleKind::ack, false));
  EXPECT_EQ(link.to_broker(), frames({}));
  link.client(body(2, "data"));
  EXPECT_EQ(link.to_broker(), frames({body(2, "data"), ack(1, 1), tx_commit()}));
}

TEST_F(SessionTx, BrokerCloseReleasesTheFramesBehindAHeldCommit) {
  link.observer.take_over = {{1, 1}};
  deliveries(1, "c1", 1, 1);
  link.client(nack(1, 1, false, true));
  link.client(tx_commit());
  const amqp::ChannelClose close = channel_close_method(406, "PRECONDITION_FAILED");
  link.broker(method(1, close));
  link.client_bytes();
  link.client(method(1, amqp::ChannelCloseOk{}));
  EXPECT_EQ(link.to_broker(), frames({method(1, amqp::ChannelCloseOk{})}));
  EXPECT_EQ(link.session.channel(1), nullptr);
}

TEST_F(SessionTx, ProxySettlementIsWrittenAgainAfterARollback) {
  link.observer.take_over_at_delivery = {{1, 1}};
  deliveries(1, "c1", 1, 2);
  ASSERT_TRUE(link.session.settle_taken_over(1, 1, SettleKind::ack, false));
  EXPECT_EQ(link.to_broker(), frames({ack(1, 1)}));
  // The broker drops it with the transaction; it goes into the next one.
  EXPECT_EQ(client_sends(tx_rollback()), frames({tx_rollback(), ack(1, 1)}));
  EXPECT_EQ(client_sends(tx_commit()), frames({tx_commit()}));
  EXPECT_EQ(client_sends(tx_rollback()), frames({tx_rollback()}));
}

}  // namespace
}  // namespace nackguard::session::test
