// The channel above the client's channel_max belongs to the proxy: the client may not use it,
// and what the broker sends on it goes to the observer only.

#include <gtest/gtest.h>

#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

using Events = std::vector<std::string>;

void expect_channel_error_and_closed(Link& link) {
  std::vector<WireFrame> to_client = link.to_client();
  ASSERT_EQ(to_client.size(), 1u);
  auto close = decode_as<amqp::ConnectionClose>(to_client[0]);
  EXPECT_EQ(to_client[0].channel, 0);
  EXPECT_EQ(close.reply_code, 504);
  EXPECT_EQ(close.reply_text.rfind("CHANNEL_ERROR - ", 0), 0u) << close.reply_text;
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_TRUE(link.session.close_after_flush(Side::client));
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));
  EXPECT_TRUE(link.session.input_closed(Side::client));
  EXPECT_TRUE(link.session.input_closed(Side::broker));
  // Whatever follows, from either side, is ignored.
  link.client(method(1, amqp::ChannelOpen{}));
  link.broker(method(1, amqp::ChannelOpenOk{}));
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.broker_bytes().empty());
}

TEST(SessionReservedChannel, ClientMethodOnItClosesTheConnectionWith504) {
  Link link;
  handshake(link);
  link.client(method(2047, amqp::ChannelOpen{}));
  expect_channel_error_and_closed(link);
}

TEST(SessionReservedChannel, ClientContentOnItClosesTheConnectionWith504) {
  Link link;
  handshake(link);
  link.client(body(2047, "sneaky"));
  expect_channel_error_and_closed(link);
}

TEST(SessionReservedChannel, ClientUsingItReturnsWhatWasOutstanding) {
  Link link;
  handshake(link);
  link.broker(deliver(1, "c1", 1));
  link.client_bytes();
  link.observer.take_events();
  link.client(method(2047, amqp::ChannelOpen{}));
  EXPECT_EQ(link.observer.take_events(), Events{"returned ch1 b1 connection_closed"});
}

TEST(SessionReservedChannel, ReservedFollowsTheClientsOwnLimit) {
  Link link;
  handshake(link, {.client_channel_max = 100});
  // 2047 is above what the client agreed to, but it is not the proxy's: the broker judges.
  Bytes open_2047 = method(2047, amqp::ChannelOpen{});
  link.client(open_2047);
  EXPECT_EQ(link.broker_bytes(), open_2047);
  link.client(method(101, amqp::ChannelOpen{}));
  expect_channel_error_and_closed(link);
}

TEST(SessionReservedChannel, ClientsHighestChannelPasses) {
  Link link;
  handshake(link);
  Bytes open = method(2046, amqp::ChannelOpen{});
  link.client(open);
  EXPECT_EQ(link.broker_bytes(), open);
  Bytes open_ok = method(2046, amqp::ChannelOpenOk{});
  link.broker(open_ok);
  EXPECT_EQ(link.client_bytes(), open_ok);
  EXPECT_TRUE(link.broker_bytes().empty());
}

// They are the proxy's channel's (proxy_channel.hpp): its channel.open-ok has it select
// confirms; a stray get-ok and its content are dropped.
TEST(SessionReservedChannel, BrokerFramesOnItGoToTheProxysChannelOnly) {
  Link link;
  handshake(link);
  Bytes open_ok = method(2047, amqp::ChannelOpenOk{});
  amqp::BasicGetOk get_ok;
  get_ok.delivery_tag = 1;
  Bytes get_ok_bytes = method(2047, get_ok);
  Bytes header_bytes = header(2047, 4);
  Bytes body_bytes = body(2047, "abcd");
  link.observer.take_events();
  link.broker(cat({open_ok, get_ok_bytes, header_bytes, body_bytes}));
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_EQ(link.broker_bytes(), method(2047, amqp::ConfirmSelect{false}));
  EXPECT_TRUE(link.observer.take_events().empty());
  // No delivery is tracked for the proxy's own get.
  EXPECT_TRUE(link.observer.deliveries.empty());
  EXPECT_EQ(link.session.channel(2047), nullptr);
  EXPECT_FALSE(link.session.close_after_flush(Side::client));
}

TEST(SessionReservedChannel, ProxyFramesDoNotDisturbAClientDelivery) {
  Link link;
  handshake(link);
  Bytes start = cat({method(1, deliver_method("c1", 1)), header(1, 4), body(1, "ab")});
  link.broker(start);
  link.broker(method(2047, amqp::ChannelOpenOk{}));
  Bytes last = body(1, "cd");
  link.broker(last);
  EXPECT_EQ(link.client_bytes(), cat({start, last}));
  EXPECT_EQ(link.broker_bytes(), method(2047, amqp::ConfirmSelect{false}));
}

}  // namespace
}  // namespace nackguard::session::test
