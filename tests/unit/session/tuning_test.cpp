// Tuning alone: the broker's tune as the client sees it, and the client's tune-ok as the
// broker sees it (the handshake tests check the same through a Session, as frames).

#include <gtest/gtest.h>

#include "proxy/session/tuning.hpp"

namespace nackguard::session {
namespace {

TEST(Tuning, TheTopChannelIsReservedAndCountedBackInAtTuneOk) {
  Tuning tuning(1048576);
  amqp::ConnectionTune offered = tuning.offer({2047, 131072, 60});
  EXPECT_EQ(offered.channel_max, 2046);
  EXPECT_EQ(offered.frame_max, 131072u);
  EXPECT_EQ(offered.heartbeat, 60);
  EXPECT_FALSE(tuning.reserved_channel());
  amqp::ConnectionTuneOk answer = tuning.answer({100, 131072, 30});
  EXPECT_EQ(answer.channel_max, 101);
  EXPECT_EQ(tuning.reserved_channel(), 101);
  EXPECT_EQ(tuning.heartbeat(), 30);
  EXPECT_EQ(tuning.frame_max(), 131072u);
}

TEST(Tuning, NoLimitsFromEitherSideBecomeTheProxysOwn) {
  Tuning tuning(65536);
  amqp::ConnectionTune offered = tuning.offer({0, 0, 0});
  EXPECT_EQ(offered.channel_max, 65534);
  EXPECT_EQ(offered.frame_max, 65536u);
  amqp::ConnectionTuneOk answer = tuning.answer({0, 0, 0});
  EXPECT_EQ(answer.channel_max, 65535);
  EXPECT_EQ(answer.frame_max, 65536u);
  EXPECT_EQ(tuning.reserved_channel(), 65535);
  EXPECT_EQ(tuning.frame_max(), 65536u);
}

TEST(Tuning, ABrokerWithOneChannelLeavesNoneToReserve) {
  Tuning tuning(131072);
  EXPECT_EQ(tuning.offer({1, 131072, 0}).channel_max, 1);
  EXPECT_EQ(tuning.answer({1, 4096, 0}).channel_max, 1);
  EXPECT_FALSE(tuning.reserved_channel());
  EXPECT_EQ(tuning.frame_max(), 4096u);
}

}  // namespace
}  // namespace nackguard::session
