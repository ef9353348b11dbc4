// A client's connection end held alone: its close, a gone client, and the two bounds
// (crash_hold_test.cpp checks the same through a Session).

#include <gtest/gtest.h>

#include "proxy/session/connection_hold.hpp"
#include "session/frame_builders.hpp"

namespace nackguard::session {
namespace {

const amqp::Bytes kClose = test::raw_method(0, 10, 50);  // connection.close, no arguments

// Its close is a HeldClose (held_close_test.cpp); the client's going after it starts the
// bound again, and the close still goes first.
TEST(ConnectionHold, AnEofAfterAHeldCloseStartsTheBoundAgain) {
  ConnectionHold hold;
  EXPECT_FALSE(hold.held());
  hold.hold_close(kClose, 1000);
  EXPECT_TRUE(hold.close_held());
  EXPECT_FALSE(hold.gone());
  hold.hold_gone(20000);
  EXPECT_FALSE(hold.overdue(1000 + ConnectionHold::kCrashHoldMs));
  EXPECT_TRUE(hold.overdue(20000 + ConnectionHold::kCrashHoldMs));
  EXPECT_EQ(hold.take_close(), kClose);
  EXPECT_TRUE(hold.held());  // the gone client, until released
  hold.release_gone();
  EXPECT_FALSE(hold.held());
}

TEST(ConnectionHold, AGoneClientIsHeldUntilReleased) {
  ConnectionHold hold;
  hold.hold_gone(100);
  EXPECT_TRUE(hold.held());
  EXPECT_FALSE(hold.close_held());
  hold.release_gone();
  EXPECT_FALSE(hold.held());
  hold.hold_close(kClose, 100);
  hold.hold_gone(100);
  hold.drop();
  EXPECT_FALSE(hold.held());
}

TEST(ConnectionHold, OverdueAfterTheBoundFromTheFirstTickWhenUndated) {
  ConnectionHold hold;
  hold.hold_gone(-1);  // before the session's first tick
  EXPECT_FALSE(hold.overdue(5000));
  EXPECT_FALSE(hold.overdue(5000 + ConnectionHold::kCrashHoldMs - 1));
  EXPECT_TRUE(hold.overdue(5000 + ConnectionHold::kCrashHoldMs));
}

TEST(ConnectionHold, TheGoneClientsCloseOkIsAwaitedForItsBound) {
  ConnectionHold hold;
  EXPECT_FALSE(hold.gone_close_sent());
  hold.mark_gone_close_sent(2000);
  EXPECT_TRUE(hold.gone_close_sent());
  EXPECT_FALSE(hold.gone_close_overdue(2000 + ConnectionHold::kGoneCloseOkMs - 1));
  EXPECT_TRUE(hold.gone_close_overdue(2000 + ConnectionHold::kGoneCloseOkMs));
}

}  // namespace
}  // namespace nackguard::session
