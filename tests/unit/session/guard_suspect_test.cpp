// A suspect (a message redelivered after a crash that found it among others in the
// consumer's hands) is handed out alone, so that a second crash names it: it waits for the
// client to settle what it already holds on the channel, and later deliveries wait behind it
// (issue 37: handed out beside others, the poison never crashed the consumer alone, and every
// crash counted against them all). A consumer that sits on what it holds (a batch) gets it
// after suspect_hold_ms anyway.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

class GuardSuspect : public GuardTest {
 protected:
  // m1 and m2 both in hand at a crash: both suspects, one return each. The next connection
  // has fresh m3 in hand (broker tag 1).
  void fresh_delivery_after_a_crash() {
    start(policy(5));
    deliver_passes(delivery(1, message("m1")));
    deliver_passes(delivery(2, message("m2")));
    client_eof();
    connect();
    deliver_passes(delivery(1, message("m3")));
  }
  // The same, and then m1 and m2 come back (broker tags 2 and 3).
  void suspects_behind_a_fresh_delivery() {
    fresh_delivery_after_a_crash();
    broker(cat({delivery(2, message("m1"), true), delivery(3, message("m2"), true)}));
  }
};

TEST_F(GuardSuspect, ASuspectWaitsUntilTheClientsHandsAreEmpty) {
  suspects_behind_a_fresh_delivery();
  EXPECT_TRUE(client_bytes().empty());  // m3 in hand: m1 waits, m2 behind it
  client_passes(ack(kCh, 1));
  EXPECT_EQ(to_client(), decode_frames(delivery(2, message("m1"), true)));  // alone now
  // It kills the consumer, alone: the culprit, counted; m2, never handed out, is not.
  const Copy copy = client_eof_with_copies({2, 3}).front();
  EXPECT_EQ(copy.header_text("x-nackguard-returns"), text(amqp::FieldValue::i64(2)));
  EXPECT_EQ(tracked("m1")->returns, 2u);
  EXPECT_EQ(tracked("m2")->returns, 1u);
}

TEST_F(GuardSuspect, TheNextSuspectWaitsForTheFirstToBeSettled) {
  suspects_behind_a_fresh_delivery();
  client_passes(ack(kCh, 1));
  to_client();
  client_passes(ack(kCh, 2));
  EXPECT_EQ(to_client(), decode_frames(delivery(3, message("m2"), true)));
  client_passes(ack(kCh, 3));
  EXPECT_FALSE(tracked("m1"));
  EXPECT_FALSE(tracked("m2"));
}

TEST_F(GuardSuspect, AClientSittingOnWhatItHoldsGetsTheSuspectAfterTheHold) {
  suspects_behind_a_fresh_delivery();
  conn->session.on_tick(1000);
  conn->session.on_tick(10999);
  EXPECT_TRUE(client_bytes().empty());
  conn->session.on_tick(11000);
  EXPECT_EQ(to_client(), decode_frames(delivery(2, message("m1"), true)));
  // m2 waits behind it as behind any suspect in the client's hands, as long again.
  conn->session.on_tick(20999);
  EXPECT_TRUE(client_bytes().empty());
  conn->session.on_tick(21000);
  EXPECT_EQ(to_client(), decode_frames(delivery(3, message("m2"), true)));
  client(ack(kCh, 3, true));
  EXPECT_EQ(to_broker(), frames({ack(kCh, 3, true)}));
}

// A basic.get has to be answered: a suspect it gets is handed out at once.
TEST_F(GuardSuspect, AGetIsAnsweredAtOnceEvenWithOthersInHand) {
  fresh_delivery_after_a_crash();
  client_passes(method(kCh, amqp::BasicGet{0, kQueue, false}));
  deliver_passes(get_ok(2, message("m1"), true));
}

}  // namespace
}  // namespace nackguard::session::guard_test
