// A held channel.close alone: its bytes kept as they came, and the bound that sends it should
// no settlement come (guard_close_test.cpp checks the same through a Session and its guard).

#include <gtest/gtest.h>

#include "proxy/session/held_close.hpp"
#include "session/frame_builders.hpp"

namespace nackguard::session {
namespace {

const amqp::Bytes kClose = test::raw_method(1, 20, 40);  // channel.close, no arguments

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

}  // namespace
}  // namespace nackguard::session
