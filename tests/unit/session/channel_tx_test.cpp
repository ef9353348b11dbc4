// A channel's held tx.commit alone (transaction.hpp): held until the proxy's settlement of
// each awaited delivery is queued, then queued itself until written; the client's frames that
// came behind it wait, in order, and a broker's channel.close lets them go (transaction_test.cpp
// checks the same through a Session).

#include <gtest/gtest.h>

#include "proxy/session/transaction.hpp"

namespace nackguard::session {
namespace {

const amqp::Bytes kCommit{1, 0, 1, 0, 0, 0, 4, 0, 90, 0, 20, 0xce};

TEST(ChannelTx, TheCommitGoesOnceEveryAwaitedSettlementIsQueued) {
  ChannelTx tx;
  EXPECT_FALSE(tx.holds_commit());
  EXPECT_FALSE(tx.settlement_queued(5));  // nothing held
  tx.hold_commit(kCommit, {5, 6});
  EXPECT_TRUE(tx.holds_commit());
  EXPECT_FALSE(tx.settlement_queued(5));
  EXPECT_FALSE(tx.settlement_queued(9));  // not awaited
  std::optional<amqp::Bytes> commit = tx.settlement_queued(6);
  ASSERT_TRUE(commit);
  EXPECT_EQ(*commit, kCommit);
  EXPECT_TRUE(tx.holds_commit());  // queued, not written
  EXPECT_FALSE(tx.replay_pending());
  tx.proxy_settles.push_back({1, 2, 3});
  tx.commit_written();
  EXPECT_TRUE(tx.proxy_settles.empty());  // committed: a rollback no longer drops them
  EXPECT_TRUE(tx.replay_pending());
  EXPECT_TRUE(tx.take_queued().empty());
  EXPECT_FALSE(tx.holds_commit());
}

TEST(ChannelTx, FramesBehindTheCommitWaitInOrderAndAnAbandonLetsThemGo) {
  ChannelTx tx;
  EXPECT_FALSE(tx.abandon());  // no commit held
  tx.hold_commit(kCommit, {5});
  tx.keep(amqp::Bytes{1, 2}, nullptr);
  tx.keep(amqp::Bytes{3}, nullptr);
  EXPECT_TRUE(tx.abandon());
  EXPECT_TRUE(tx.replay_pending());
  EXPECT_FALSE(tx.settlement_queued(5));  // the commit is gone with the channel
  EXPECT_EQ(tx.take_queued(), (amqp::Bytes{1, 2, 3}));
  EXPECT_FALSE(tx.holds_commit());
}

}  // namespace
}  // namespace nackguard::session
