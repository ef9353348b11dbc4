// The held closes alone. A held channel.close: its bytes kept as they came, and the bound that
// sends it should no settlement come (guard_close_test.cpp checks the same through a Session
// and its guard). A client's connection end (ConnectionHold): its close, a HeldClose too, a gone
// client, and the two bounds (crash_hold_test.cpp checks the same through a Session).

#include <gtest/gtest.h>

#include "proxy/session/connection_hold.hpp"
#include "proxy/session/held_close.hpp"
#include "session/frame_builders.hpp"

namespace nackguard::session {
namespace {

const amqp::Bytes kClose = test::raw_method(1, 20, 40);            // channel.close, no arguments
const amqp::Bytes kConnectionClose = test::raw_method(0, 10, 50);  // connection.close

TEST(HeldClose, KeepsTheCloseAsItCameUntilTaken) {
  HeldClose held;
  EXPECT_FALSE(held.held());
  held.hold(kClose, 500);
  EXPECT_TRUE(held.held());
  EXPECT_EQ(held.take(), kClose);
  EXPECT_FALSE(held.held());
  EXPECT_TRUE(held.take().empty());
}

TEST(HeldClose, OverdueAfterTheBound) {
  HeldClose held;
  EXPECT_FALSE(held.overdue(100000));  // nothing held
  held.hold(kClose, 1000);
  EXPECT_FALSE(held.overdue(1000 + HeldClose::kHeldCloseMs - 1));
  EXPECT_TRUE(held.overdue(1000 + HeldClose::kHeldCloseMs));
}

TEST(HeldClose, HeldBeforeTheClockStartedIsDatedByTheNextTick) {
  HeldClose held;
  held.hold(kClose, -1);
  EXPECT_FALSE(held.overdue(7000));
  EXPECT_FALSE(held.overdue(7000 + HeldClose::kHeldCloseMs - 1));
  EXPECT_TRUE(held.overdue(7000 + HeldClose::kHeldCloseMs));
}

TEST(HeldClose, ADroppedCloseGoesNowhere) {
  HeldClose held;
  held.hold(kClose, 0);
  held.drop();
  EXPECT_FALSE(held.held());
  EXPECT_FALSE(held.overdue(HeldClose::kHeldCloseMs));
}

// Its close is a HeldClose (held_close_test.cpp); the client's going after it starts the
// bound again, and the close still goes first.
TEST(ConnectionHold, AnEofAfterAHeldCloseStartsTheBoundAgain) {
  ConnectionHold hold;
  EXPECT_FALSE(hold.held());
  hold.hold_close(kConnectionClose, 1000);
  EXPECT_TRUE(hold.close_held());
  EXPECT_FALSE(hold.gone());
  hold.hold_gone(20000);
  EXPECT_FALSE(hold.overdue(1000 + ConnectionHold::kCrashHoldMs));
  EXPECT_TRUE(hold.overdue(20000 + ConnectionHold::kCrashHoldMs));
  EXPECT_EQ(hold.take_close(), kConnectionClose);
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
  hold.hold_close(kConnectionClose, 100);
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
