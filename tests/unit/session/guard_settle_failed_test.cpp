// A copy confirmed when its original can no longer be acked (the proxy is closing the
// connection, or the broker closes the channel while the ack waits for the end of a client's
// publish): the broker keeps the original and delivers it again, so nothing may be recorded as
// dead-lettered and the message's count must stay.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

class GuardSettleFailed : public GuardTest {};

TEST_F(GuardSettleFailed, ConfirmAfterTheShutdownCloseRecordsNoDeadLetter) {
  start(policy(0));
  deliver_passes(delivery(1, message("m1")));
  now += 1000;
  client(nack(kCh, 1));
  EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
  broker(declare_ok("q.dlq"));
  std::vector<Wire> sent = to_broker();
  EXPECT_EQ(take_copy(sent).frames, sent.size());

  // Shutdown: connection.close 320 to the client; the taken-over original can no longer be
  // settled, but the proxy's channel still hears its confirm.
  conn->session.close_gracefully(320, "CONNECTION_FORCED - shutdown");
  client_bytes();
  confirm(1);
  EXPECT_TRUE(to_broker().empty());  // no ack of the original
  EXPECT_TRUE(listener.dead_letters.empty());
  EXPECT_TRUE(listener.requeues.empty());
  ASSERT_TRUE(tracked("m1"));
  EXPECT_EQ(tracked("m1")->returns, 1u);
}

TEST_F(GuardSettleFailed, AckDroppedByTheBrokersChannelCloseRecordsNoDeadLetter) {
  // The ack of the original waits for the end of the client's publish.
  dead_letter_confirmed_mid_publish();
  EXPECT_TRUE(broker_bytes().empty());
  EXPECT_TRUE(listener.dead_letters.empty());

  // The broker closes the channel first: the ack is dropped, the original goes back.
  broker(channel_close(406, "PRECONDITION_FAILED - unknown delivery tag 9", 60, 80, kCh));
  EXPECT_TRUE(listener.dead_letters.empty());
  EXPECT_TRUE(listener.requeues.empty());
  ASSERT_TRUE(tracked("m1"));
  EXPECT_EQ(tracked("m1")->returns, 1u);
}

}  // namespace
}  // namespace nackguard::session::guard_test
