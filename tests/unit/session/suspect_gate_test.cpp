// The suspect gate alone: who opens it, and the hold that opens it for a client sitting on its
// suspect (guard_suspect_test.cpp checks the same through a Session and its guard).

#include <gtest/gtest.h>

#include "proxy/session/suspect_gate.hpp"

namespace nackguard::session {
namespace {

TEST(SuspectGate, OnlyTheSuspectsSettlementOpensIt) {
  SuspectGate gate;
  EXPECT_FALSE(gate.closed());
  EXPECT_FALSE(gate.settled(7));  // open: nothing to open
  gate.close(7);
  EXPECT_TRUE(gate.closed());
  EXPECT_EQ(gate.suspect(), 7u);
  EXPECT_FALSE(gate.settled(6));
  EXPECT_TRUE(gate.closed());
  EXPECT_TRUE(gate.settled(7));
  EXPECT_FALSE(gate.closed());
  EXPECT_EQ(gate.suspect(), 0u);
}

TEST(SuspectGate, OpenGivesEverythingBack) {
  SuspectGate gate;
  gate.close(3);
  gate.open();
  EXPECT_FALSE(gate.closed());
}

TEST(SuspectGate, AWaitOfTheHoldOpensIt) {
  SuspectGate gate;
  gate.close(1);
  EXPECT_FALSE(gate.overdue(1000, 10000, true));   // the first tick that sees the wait
  EXPECT_FALSE(gate.overdue(10999, 10000, true));  // 9,999 ms
  EXPECT_TRUE(gate.closed());
  EXPECT_TRUE(gate.overdue(11000, 10000, true));
  EXPECT_FALSE(gate.closed());
}

TEST(SuspectGate, AWaitThatEndsStartsAgainFromZero) {
  SuspectGate gate;
  gate.close(1);
  EXPECT_FALSE(gate.overdue(0, 10000, true));
  EXPECT_FALSE(gate.overdue(5000, 10000, false));  // nothing waits any more
  EXPECT_FALSE(gate.overdue(6000, 10000, true));   // waits again: from here
  EXPECT_FALSE(gate.overdue(15999, 10000, true));
  EXPECT_TRUE(gate.overdue(16000, 10000, true));
}

TEST(SuspectGate, WhatStillWaitsAfterAnOverdueWaitsFromThen) {
  SuspectGate gate;
  gate.close(1);
  EXPECT_FALSE(gate.overdue(0, 10000, true));
  ASSERT_TRUE(gate.overdue(10000, 10000, true));
  gate.close(2);  // the caller handed out the next one, a suspect too
  gate.waited_again(10000, true);
  EXPECT_FALSE(gate.overdue(19999, 10000, true));
  EXPECT_TRUE(gate.overdue(20000, 10000, true));
  gate.waited_again(20000, false);                 // nothing left behind it
  EXPECT_FALSE(gate.overdue(20001, 10000, true));  // a new wait starts at its first tick
  EXPECT_FALSE(gate.overdue(29999, 10000, true));
  EXPECT_TRUE(gate.overdue(30001, 10000, true));
}

}  // namespace
}  // namespace nackguard::session
