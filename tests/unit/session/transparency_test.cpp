// After the handshake, whatever the session does not have to change comes out as the bytes
// that went in, however the input is cut into reads.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

amqp::BasicProperties rich_properties() {
  amqp::BasicProperties p;
  p.content_type = "application/json";
  p.delivery_mode = 2;
  p.priority = 3;
  p.message_id = "m-1";
  p.timestamp = 1700000000;
  amqp::FieldTable headers;
  headers.set("x-retry", amqp::FieldValue::i16(2));  // 's': a re-encoder might widen it
  headers.set("x-flag", amqp::FieldValue::boolean(true));
  headers.set("x-raw", amqp::FieldValue::bytes("\x00\xff"));
  p.headers = headers;
  return p;
}

Bytes client_stream() {
  amqp::QueueDeclare declare;
  declare.queue = "orders";
  declare.durable = true;
  declare.arguments.set("x-message-ttl", amqp::FieldValue::i32(60000));
  amqp::BasicConsume consume;
  consume.queue = "orders";
  consume.consumer_tag = "c1";
  amqp::BasicPublish publish;
  publish.exchange = "ex";
  publish.routing_key = "orders.new";
  amqp::BasicGet get;
  get.queue = "orders";
  return cat({
      method(1, amqp::ChannelOpen{}),
      method(2, amqp::ChannelOpen{}),
      method(1, declare),
      method(1, amqp::BasicQos{0, 10, false}),
      method(1, consume),
      method(2, publish),
      content(2, "a body split into several frames", rich_properties(), 7),
      heartbeat(),
      raw_method(2, 90, 10),  // tx.select
      method(2, publish),
      header(2, 0),           // an empty body: no body frames
      raw_method(2, 90, 20),  // tx.commit
      // Spec methods the codec does not decode (a client's unknown method is refused with
      // 540 instead: unknown_method_test.cpp).
      raw_method(1, 40, 10, Bytes{1, 2, 3, 4}),  // exchange.declare
      raw_method(1, 50, 20, Bytes{9}),           // queue.bind
      ack(1, 1),
      ack(1, 3, true),
      nack(1, 4, false, true),
      method(1, get),
      reject(1, 5, false),
      method(2, amqp::ConfirmSelect{}),
      method(2, publish),
      content(2, "confirmed"),
      heartbeat(),
  });
}

Bytes broker_stream() {
  amqp::QueueDeclareOk declare_ok;
  declare_ok.queue = "orders";
  amqp::BasicGetOk get_ok;
  get_ok.delivery_tag = 5;
  get_ok.exchange = "ex";
  get_ok.routing_key = "orders.new";
  get_ok.message_count = 3;
  amqp::BasicReturn ret;
  ret.reply_code = 312;
  ret.reply_text = "NO_ROUTE";
  ret.exchange = "ex";
  ret.routing_key = "nowhere";
  return cat({
      method(1, amqp::ChannelOpenOk{}),
      method(2, amqp::ChannelOpenOk{}),
      method(1, declare_ok),
      method(1, amqp::BasicQosOk{}),
      method(1, amqp::BasicConsumeOk{"c1"}),
      method(1, deliver_method("c1", 1)),
      content(1, "first delivery, three frames", rich_properties(), 10),
      method(1, deliver_method("c1", 2, true)),
      content(1, ""),
      heartbeat(),
      method(1, deliver_method("c1", 3)),
      content(1, "third"),
      raw_method(2, 90, 11),  // tx.select-ok
      method(1, deliver_method("c1", 4)),
      content(1, "fourth", {}, 2),
      raw_method(1, 200, 8, Bytes{5, 6}),
      raw_method(2, 90, 21),  // tx.commit-ok
      method(1, get_ok),
      content(1, "got"),
      method(2, amqp::ConfirmSelectOk{}),
      method(2, ret),
      content(2, "returned"),
      method(2, amqp::BasicAck{1, false}),  // a publisher confirm
      method(0, amqp::ConnectionBlocked{"low on memory"}),
      method(0, amqp::ConnectionUnblocked{}),
      heartbeat(),
  });
}

TEST(SessionTransparency, StreamsInOneReadPassByteIdentical) {
  Link link;
  handshake(link);
  Bytes from_client = client_stream();
  Bytes from_broker = broker_stream();
  link.broker(from_broker);
  link.client(from_client);
  EXPECT_EQ(link.client_bytes(), from_broker);
  EXPECT_EQ(link.broker_bytes(), from_client);
  EXPECT_FALSE(link.session.close_after_flush(Side::client));
  EXPECT_FALSE(link.session.close_after_flush(Side::broker));
  // The deliveries were seen on the way: four deliveries and a get-ok.
  EXPECT_EQ(link.observer.deliveries.size(), 5u);
}

TEST(SessionTransparency, OneByteAtATimePassesByteIdentical) {
  Link link;
  handshake(link);
  Bytes from_client = client_stream();
  Bytes from_broker = broker_stream();
  Bytes to_client, to_broker;
  std::size_t longest = std::max(from_client.size(), from_broker.size());
  for (std::size_t i = 0; i < longest; ++i) {
    if (i < from_broker.size()) link.broker(ByteView(&from_broker[i], 1));
    if (i < from_client.size()) link.client(ByteView(&from_client[i], 1));
    Bytes c = link.client_bytes();
    Bytes b = link.broker_bytes();
    to_client.insert(to_client.end(), c.begin(), c.end());
    to_broker.insert(to_broker.end(), b.begin(), b.end());
  }
  EXPECT_EQ(to_client, from_broker);
  EXPECT_EQ(to_broker, from_client);
}

TEST(SessionTransparency, RandomChunkingsPassByteIdentical) {
  const Bytes from_client = client_stream();
  const Bytes from_broker = broker_stream();
  std::mt19937 rng(20240611);
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Link link;
    handshake(link);
    std::size_t max_chunk = 1 + rng() % 97;
    std::size_t at_client = 0, at_broker = 0;
    Bytes to_client, to_broker;
    while (at_client < from_client.size() || at_broker < from_broker.size()) {
      bool client_turn =
          at_broker == from_broker.size() || (at_client < from_client.size() && rng() % 2 == 0);
      const Bytes& source = client_turn ? from_client : from_broker;
      std::size_t& at = client_turn ? at_client : at_broker;
      std::size_t n = std::min<std::size_t>(1 + rng() % max_chunk, source.size() - at);
      ByteView chunk = ByteView(source).subspan(at, n);
      if (client_turn) {
        link.client(chunk);
      } else {
        link.broker(chunk);
      }
      at += n;
      if (rng() % 3 == 0) {
        Bytes c = link.client_bytes();
        Bytes b = link.broker_bytes();
        to_client.insert(to_client.end(), c.begin(), c.end());
        to_broker.insert(to_broker.end(), b.begin(), b.end());
      }
    }
    Bytes c = link.client_bytes();
    Bytes b = link.broker_bytes();
    to_client.insert(to_client.end(), c.begin(), c.end());
    to_broker.insert(to_broker.end(), b.begin(), b.end());
    ASSERT_EQ(to_client, from_broker);
    ASSERT_EQ(to_broker, from_client);
  }
}

TEST(SessionTransparency, DeliverMethodIsHeldUntilItsHeaderArrives) {
  Link link;
  handshake(link);
  Bytes deliver_frame = method(1, deliver_method("c1", 1));
  link.broker(deliver_frame);
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.observer.deliveries.empty());
  // Frames of other channels and heartbeats are not held behind it.
  Bytes other = method(2, amqp::ChannelOpenOk{});
  link.broker(cat({heartbeat(), other}));
  EXPECT_EQ(link.client_bytes(), cat({heartbeat(), other}));
  Bytes rest = content(1, "x");
  link.broker(rest);
  EXPECT_EQ(link.client_bytes(), cat({deliver_frame, rest}));
  EXPECT_EQ(link.observer.deliveries.size(), 1u);
}

TEST(SessionTransparency, HandshakeFedByteByByteMatchesWholeReads) {
  Link whole;
  handshake(whole);
  HandshakeFrames f = handshake_frames({}, {});
  Bytes tune_ok = method(0, amqp::ConnectionTuneOk{{2046, 131072, 60}});
  Link bytewise;
  Bytes to_client, to_broker;
  auto drain = [&] {
    Bytes c = bytewise.client_bytes();
    Bytes b = bytewise.broker_bytes();
    to_client.insert(to_client.end(), c.begin(), c.end());
    to_broker.insert(to_broker.end(), b.begin(), b.end());
  };
  auto feed = [&](Side side, const Bytes& bytes) {
    for (std::uint8_t b : bytes) bytewise.session.feed(side, Bytes{b});
    drain();
  };
  feed(Side::client, protocol_header());
  feed(Side::broker, f.start);
  feed(Side::client, f.start_ok);
  feed(Side::broker, f.tune);
  feed(Side::client, tune_ok);
  feed(Side::client, f.open);
  feed(Side::broker, f.open_ok);
  EXPECT_TRUE(bytewise.session.is_open());
  EXPECT_EQ(to_client,
            cat({f.start, method(0, amqp::ConnectionTune{2046, 131072, 60}), f.open_ok}));
  EXPECT_EQ(to_broker, cat({protocol_header(), f.start_ok,
                            method(0, amqp::ConnectionTuneOk{{2047, 131072, 60}}), f.open}));
  EXPECT_EQ(bytewise.session.reserved_channel(), whole.session.reserved_channel());
}

}  // namespace
}  // namespace nackguard::session::test
