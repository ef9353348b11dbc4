// A method AMQP 0-9-1 does not have (amqp::is_spec_method false), from the client: never
// forwarded (RabbitMQ 3.10's connection process crashes on one, and the client gets 320 with
// no cause). The client gets connection.close 540 naming the ids; the broker gets a clean
// connection.close; nothing more is read from either side, and what the client held is
// returned as for any other broken client connection. From the broker, such a method is
// forwarded as it is: the client may know it.

#include <gtest/gtest.h>

#include <algorithm>

#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

using Events = std::vector<std::string>;

struct UnknownCase {
  const char* name;
  std::uint16_t channel;
  std::uint16_t class_id;
  std::uint16_t method_id;
};

void PrintTo(const UnknownCase& c, std::ostream* os) {
  *os << c.name;
}

const UnknownCase kCases[] = {
    {"basic_999_on_channel_1", 1, 60, 999},
    {"basic_121_on_channel_1", 1, 60, 121},
    {"unknown_class_on_channel_3", 3, 77, 10},
    {"unknown_connection_method_on_channel_0", 0, 10, 99},
    {"unknown_class_on_channel_0", 0, 200, 1},
    {"queue_12_on_channel_1", 1, 50, 12},
};

class SessionUnknownMethod : public ::testing::TestWithParam<UnknownCase> {};

TEST_P(SessionUnknownMethod, ClientGets540NamingTheIdsAndTheBrokerACleanClose) {
  const UnknownCase& c = GetParam();
  Link link;
  handshake(link);
  link.client(method(1, amqp::ChannelOpen{}));
  link.broker(method(1, amqp::ChannelOpenOk{}));
  link.broker(deliver(1, "c1", 1));  // something outstanding, to be returned
  link.client_bytes();
  link.broker_bytes();
  link.observer.take_events();

  link.client(raw_method(c.channel, c.class_id, c.method_id, Bytes{0, 0, 0, 0}));

  std::vector<WireFrame> to_client = link.to_client();
  ASSERT_EQ(to_client.size(), 1u);
  auto close = decode_as<amqp::ConnectionClose>(to_client[0]);
  EXPECT_EQ(to_client[0].channel, 0);
  EXPECT_EQ(close.reply_code, 540);
  const std::string ids =
      "class " + std::to_string(c.class_id) + ", method " + std::to_string(c.method_id);
  EXPECT_EQ(close.reply_text, "NOT_IMPLEMENTED - nackguard: unknown method (" + ids +
                                  ") on channel " + std::to_string(c.channel) +
                                  "; AMQP 0-9-1 has no such method");
  EXPECT_EQ(close.class_id, c.class_id);
  EXPECT_EQ(close.method_id, c.method_id);

  // The broker never sees the method: only a client's ordinary close, then the socket ends.
  std::vector<WireFrame> to_broker = link.to_broker();
  ASSERT_EQ(to_broker.size(), 1u);
  auto upstream = decode_as<amqp::ConnectionClose>(to_broker[0]);
  EXPECT_EQ(to_broker[0].channel, 0);
  EXPECT_EQ(upstream.reply_code, 200);
  EXPECT_NE(upstream.reply_text.find(ids), std::string::npos) << upstream.reply_text;

  EXPECT_TRUE(link.session.close_after_flush(Side::client));
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));
  EXPECT_TRUE(link.session.input_closed(Side::client));
  EXPECT_TRUE(link.session.input_closed(Side::broker));
  Events events = link.observer.take_events();
  EXPECT_EQ(std::count(events.begin(), events.end(), "returned ch1 b1 connection_closed"), 1);

  // Nothing more is read or written.
  link.client(method(1, amqp::BasicAck{1, false}));
  link.broker(method(0, amqp::ConnectionCloseOk{}));
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.broker_bytes().empty());
}

INSTANTIATE_TEST_SUITE_P(Named, SessionUnknownMethod, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SessionUnknownMethodHandshake, BeforeTheConnectionIsOpenTheBrokerSocketIsOnlyClosed) {
  Link link;
  link.client(protocol_header());
  link.broker_bytes();
  link.client(raw_method(0, 10, 99));
  std::vector<WireFrame> to_client = link.to_client();
  ASSERT_EQ(to_client.size(), 1u);
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_client[0]).reply_code, 540);
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));
}

TEST(SessionUnknownMethodSpec, EverySpecMethodTheCodecDoesNotDecodeIsForwarded) {
  Link link;
  handshake(link);
  link.client(method(1, amqp::ChannelOpen{}));
  link.broker(method(1, amqp::ChannelOpenOk{}));
  link.client_bytes();
  link.broker_bytes();
  // exchange.declare, queue.bind, queue.purge, tx.select, access.request: as they are.
  for (auto [class_id, method_id] :
       {std::pair<std::uint16_t, std::uint16_t>{40, 10}, {50, 20}, {50, 30}, {90, 10}, {30, 10}}) {
    Bytes in = raw_method(1, class_id, method_id, Bytes{0, 0});
    link.client(in);
    EXPECT_EQ(link.broker_bytes(), in) << class_id << "." << method_id;
  }
  EXPECT_FALSE(link.session.close_after_flush(Side::client));
}

TEST(SessionUnknownMethodFromBroker, IsForwardedToTheClientAsItIs) {
  Link link;
  handshake(link);
  link.client(method(1, amqp::ChannelOpen{}));
  link.broker(method(1, amqp::ChannelOpenOk{}));
  link.client_bytes();
  Bytes in = raw_method(1, 60, 999, Bytes{1, 2});
  link.broker(in);
  EXPECT_EQ(link.client_bytes(), in);
  Bytes on_zero = raw_method(0, 10, 99);
  link.broker(on_zero);
  EXPECT_EQ(link.client_bytes(), on_zero);
  EXPECT_FALSE(link.session.close_after_flush(Side::client));
  EXPECT_FALSE(link.session.close_after_flush(Side::broker));
}

}  // namespace
}  // namespace nackguard::session::test
