// The session's parts alone, on a SessionCore with no handshake and no Session: the proxy's
// ack-timeout close (AckCloses) and the client's tx methods (TxMethods). The byte-level session
// tests check the same through a whole Session.

#include <gtest/gtest.h>

#include <utility>

#include "proxy/session/ack_closes.hpp"
#include "proxy/session/ack_timeout.hpp"
#include "proxy/session/tx_methods.hpp"
#include "session/frame_builders.hpp"
#include "session/recording_observer.hpp"
#include "session/tracking_fixture.hpp"

namespace nackguard::session {
namespace {

using namespace test;  // frame_builders.hpp

// An open connection's core whose channels the test fills in directly.
struct CoreRig {
  RecordingObserver observer;
  SessionCore core{SessionOptions{}, &observer};

  CoreRig() {
    core.phase_ = SessionCore::Phase::open;
    core.clock_ms_ = 0;
  }
  // Channel `number` holds delivery `tag` (the same tag on both sides), handed out at `at_ms`.
  ChannelState& holding(std::uint16_t number, std::uint64_t tag, std::int64_t at_ms) {
    ChannelState& ch = core.channel_state(number);
    Delivery d = ch.fresh_delivery();
    d.channel = number;
    d.client_tag = tag;
    d.broker_tag = tag;
    d.queue = "q";
    d.handed_out_ms = at_ms;
    d.header_payload = Bytes{0, 60, 0, 0};  // a record, not a slim one
    ch.note_handed_out(tag, tag);
    ch.add_unacked(std::move(d));
    return ch;
  }
  Bytes take_output(Side side) { return std::exchange(core.io(side).out.bytes(), {}); }
};

TEST(AckCloses, ClosesBothSidesPastTheTimeoutAndEndsTheChannelAtBothCloseOks) {
  CoreRig rig;
  rig.observer.ack_timeout = 1000;
  ChannelState& ch = rig.holding(1, 1, 0);
  const Delivery held = *ch.oldest_unacked();
  AckCloses closes(rig.core);

  closes.check(999);
  EXPECT_TRUE(rig.take_output(Side::client).empty());
  EXPECT_FALSE(ch.ack_close.active);

  closes.check(1500);
  const AckTimeoutClose frames = ack_timeout_close(1, held, 1500, 1000);
  EXPECT_EQ(rig.take_output(Side::client), frames.to_client);
  EXPECT_EQ(rig.take_output(Side::broker), frames.to_broker);
  EXPECT_EQ(rig.observer.take_events(), Events{"ack-timeout ch1 b1 held 1500"});
  EXPECT_TRUE(ch.ack_close.active);

  // The client's close-ok, then its next frame on the channel: kept for after the broker's.
  const Bytes open = method(1, amqp::ChannelOpen{});
  EXPECT_FALSE(closes.client_frame(ch, only_frame(method(1, amqp::ChannelCloseOk{}))));
  EXPECT_FALSE(closes.client_frame(ch, only_frame(open)));
  ASSERT_NE(rig.core.channels_.find(1), rig.core.channels_.end());

  std::optional<ChannelState::AckClose> ended =
      closes.broker_frame(ch, only_frame(method(1, amqp::ChannelCloseOk{})));
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->queued, open);  // the caller handles it
  EXPECT_EQ(rig.core.channels_.find(1), rig.core.channels_.end());
  // Only the delivery that timed out counts a return.
  EXPECT_EQ(rig.observer.take_events(), Events{"returned ch1 b1 consumer_timeout"});
  EXPECT_TRUE(rig.take_output(Side::client).empty());
  EXPECT_TRUE(rig.take_output(Side::broker).empty());
}

TEST(AckCloses, AnswersACrossedCloseAndDropsTheClientsLateCloseOk) {
  CoreRig rig;
  rig.observer.ack_timeout = 1000;
  ChannelState& ch = rig.holding(1, 1, 0);
  AckCloses closes(rig.core);
  closes.check(2000);
  rig.take_output(Side::client);
  rig.take_output(Side::broker);

  // The client closed before it read the proxy's close: it gets a close-ok.
  const Bytes close = method(1, channel_close_method(200, "bye"));
  EXPECT_FALSE(closes.client_frame(ch, only_frame(close)));
  EXPECT_EQ(rig.take_output(Side::client), method(1, amqp::ChannelCloseOk{}));
  EXPECT_TRUE(closes.awaits_stray_close_ok());
  EXPECT_TRUE(closes.broker_frame(ch, only_frame(method(1, amqp::ChannelCloseOk{}))));

  // Its close-ok for the proxy's close comes later and is dropped; then nothing is awaited.
  EXPECT_FALSE(closes.take_stray_close_ok(only_frame(method(2, amqp::ChannelCloseOk{}))));
  EXPECT_TRUE(closes.take_stray_close_ok(only_frame(method(1, amqp::ChannelCloseOk{}))));
  EXPECT_FALSE(closes.awaits_stray_close_ok());
}

TEST(TxMethods, RollbackPutsTheTransactionsSettlementsBackAmongTheUnacked) {
  CoreRig rig;
  ChannelState& ch = rig.holding(1, 1, 0);
  TxMethods tx(rig.core);
  const Bytes select = tx_select(1);
  tx.method(ch, only_frame(select), tx_mid::select);
  EXPECT_TRUE(ch.tx.active);
  EXPECT_EQ(rig.take_output(Side::broker), select);

  for (Delivery& d : ch.take_settled(1, false)) ch.tx_settle(std::move(d), SettleKind::ack, false);
  EXPECT_EQ(ch.unacked_count(), 0u);
  const Bytes rollback = tx_rollback(1);
  tx.method(ch, only_frame(rollback), tx_mid::rollback);
  EXPECT_EQ(rig.take_output(Side::broker), rollback);
  EXPECT_EQ(ch.unacked_count(), 1u);
  EXPECT_TRUE(rig.observer.take_events().empty());  // nothing settled

  // Settled again and committed: the observer hears of it at the commit.
  for (Delivery& d : ch.take_settled(1, false)) ch.tx_settle(std::move(d), SettleKind::ack, false);
  const Bytes commit = tx_commit(1);
  tx.method(ch, only_frame(commit), tx_mid::commit);
  EXPECT_EQ(rig.take_output(Side::broker), commit);
  EXPECT_EQ(rig.observer.take_events(), Events{"settled ch1 b1 c1 ack"});
}

}  // namespace
}  // namespace nackguard::session
