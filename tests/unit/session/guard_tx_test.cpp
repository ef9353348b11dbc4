// A consumer in transaction mode through a real Session and Guard: a requeue past the limit is
// dead-lettered only at the client's commit, which carries the proxy's ack of the original;
// a rollback before the commit leaves no copy and the delivery the client's.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

using test::tx_commit;
using test::tx_commit_ok;
using test::tx_rollback;
using test::tx_select;

class GuardTx : public GuardTest {
 protected:
  // Policy max_redeliveries 0: the first requeue is dead-lettered. The client's channel is in
  // tx mode and holds message m1 under tag 1.
  void SetUp() override {
    start(policy(0));
    client_passes(tx_select(kCh));
    deliver_passes(delivery(1, message("m1")));
  }
};

TEST_F(GuardTx, DeadLetterWaitsForTheCommitAndTheCommitCarriesTheAck) {
  client(nack(kCh, 1));
  // Nothing before the commit: no copy, no nack.
  EXPECT_EQ(to_broker(), frames({}));
  client(tx_commit(kCh));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  Copy copy = take_copy(to_broker());
  EXPECT_EQ(copy.publish.routing_key, "q.dlq");
  // The confirm: the ack of the original, then the client's commit, which makes it effective.
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1), tx_commit(kCh)}));
  deliver_passes(tx_commit_ok(kCh));
  ASSERT_EQ(listener.dead_letters.size(), 1u);
  EXPECT_EQ(listener.dead_letters[0].reason, retry::DeadLetterReason::max_redeliveries);
  EXPECT_TRUE(listener.fallbacks.empty());
}

TEST_F(GuardTx, RollbackDropsTheTakeoverAndTheClientAcksItLater) {
  client(nack(kCh, 1));
  client_passes(tx_rollback(kCh));
  client_passes(ack(kCh, 1));
  client_passes(tx_commit(kCh));
  // No copy was published, nothing was dead-lettered: the proxy's channel never opened.
  EXPECT_TRUE(listener.dead_letters.empty());
  EXPECT_EQ(conn->session.copies_outstanding(), 0u);
}

TEST_F(GuardTx, NackAgainAfterARollbackIsDeadLetteredOnce) {
  client(nack(kCh, 1));
  client_passes(tx_rollback(kCh));
  client(nack(kCh, 1));
  EXPECT_EQ(to_broker(), frames({}));
  client(tx_commit(kCh));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  take_copy(to_broker());
  confirm(1);
  EXPECT_EQ(to_broker(), frames({ack(kCh, 1), tx_commit(kCh)}));
  EXPECT_EQ(listener.dead_letters.size(), 1u);
}

TEST_F(GuardTx, RefusedCopyFallsBackToTheClientsNackBeforeTheCommit) {
  client(nack(kCh, 1));
  client(tx_commit(kCh));
  open_proxy_channel();
  broker(declare_ok("q.dlq"));
  take_copy(to_broker());
  refuse(1);
  EXPECT_EQ(to_broker(), frames({nack(kCh, 1), tx_commit(kCh)}));
  EXPECT_TRUE(listener.dead_letters.empty());
  ASSERT_EQ(listener.fallbacks.size(), 1u);
  EXPECT_EQ(listener.fallbacks[0].cause, retry::FallbackCause::republish_failed);
}

}  // namespace
}  // namespace nackguard::session::guard_test
