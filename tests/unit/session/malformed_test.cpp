// Malformed or out-of-order input: connection.close with 501 or 505 to the side that sent it;
// the other side is told 320 if the broker broke an open connection, and otherwise only
// closed; nothing more is read from either.

#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>

#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

using Events = std::vector<std::string>;

amqp::BasicPublish publish_method() {
  amqp::BasicPublish m;
  m.routing_key = "q";
  return m;
}

Bytes with_end_octet(Bytes frame, std::uint8_t end) {
  frame.back() = end;
  return frame;
}

// Only the 7-byte header of a frame whose payload would be `size` bytes.
Bytes frame_header(std::uint8_t type, std::uint16_t channel, std::uint32_t size) {
  Bytes out;
  amqp::ByteWriter w(out);
  w.u8(type);
  w.u16(channel);
  w.u32(size);
  return out;
}

struct MalformedCase {
  const char* name;
  Side offender;
  Bytes (*setup)();  // valid frames from the offender first; they pass
  Bytes (*bad)();
  std::uint16_t code;
};

void PrintTo(const MalformedCase& c, std::ostream* os) {
  *os << c.name;
}

Bytes nothing() {
  return {};
}

// The session's frame_max after the default handshake is 131072.
const MalformedCase kCases[] = {
    {"client_bad_end_octet", Side::client, nothing,
     [] { return with_end_octet(method(1, amqp::ChannelOpen{}), 0x00); }, 501},
    {"client_frame_over_frame_max", Side::client, nothing,
     [] { return frame_header(3, 1, 131072 - 8 + 1); }, 501},
    {"client_unknown_frame_type", Side::client, nothing,
     [] {
       return frame(static_cast<amqp::FrameType>(4), 1, Bytes{0, 0});
     },
     501},
    {"client_heartbeat_on_a_channel", Side::client, nothing,
     [] { return frame(amqp::FrameType::heartbeat, 1, {}); }, 501},
    {"client_body_without_header", Side::client, [] { return method(1, publish_method()); },
     [] { return body(1, "x"); }, 505},
    {"client_body_when_idle", Side::client, nothing, [] { return body(1, "x"); }, 505},
    {"client_header_without_method", Side::client, nothing, [] { return header(1, 1); }, 505},
    {"client_method_while_body_expected", Side::client,
     [] {
       return cat({method(1, publish_method()), header(1, 10), body(1, "abc")});
     },
     [] { return method(1, amqp::ChannelOpen{}); }, 505},
    {"client_body_beyond_announced_size", Side::client,
     [] {
       return cat({method(1, publish_method()), header(1, 3)});
     },
     [] { return body(1, "abcd"); }, 505},
    {"client_header_on_channel_0", Side::client, nothing, [] { return header(0, 1); }, 505},
    {"client_body_on_channel_0", Side::client, nothing, [] { return body(0, "x"); }, 505},
    {"client_truncated_basic_ack", Side::client, nothing,
     [] {
       return raw_method(1, 60, 80, Bytes{0, 0, 0, 0, 0, 0, 0, 1});
     },
     501},
    {"client_method_shorter_than_its_ids", Side::client, nothing,
     [] {
       return frame(amqp::FrameType::method, 1, Bytes{0, 60});
     },
     501},
    {"client_truncated_consume", Side::client, nothing,
     [] {
       return raw_method(1, 60, 20, Bytes{0, 0, 9, 'q'});
     },
     501},

    {"broker_bad_end_octet", Side::broker, nothing,
     [] { return with_end_octet(method(1, amqp::ChannelOpenOk{}), 0xCD); }, 501},
    {"broker_frame_over_frame_max", Side::broker, nothing,
     [] { return frame_header(3, 1, 131072 - 8 + 1); }, 501},
    {"broker_unknown_frame_type", Side::broker, nothing,
     [] { return frame(static_cast<amqp::FrameType>(9), 1, Bytes{0}); }, 501},
    {"broker_body_without_header", Side::broker,
     [] {
       return method(1, amqp::BasicReturn{312, "NO_ROUTE", "ex", "rk"});
     },
     [] { return body(1, "x"); }, 505},
    {"broker_header_without_method", Side::broker, nothing, [] { return header(1, 3); }, 505},
    {"broker_method_while_body_expected", Side::broker,
     [] {
       return cat({method(1, deliver_method("c1", 1)), header(1, 5), body(1, "ab")});
     },
     [] { return method(1, amqp::ChannelOpenOk{}); }, 505},
    {"broker_body_beyond_announced_size", Side::broker,
     [] {
       return cat({method(1, deliver_method("c1", 1)), header(1, 1)});
     },
     [] { return body(1, "xy"); }, 505},
    {"broker_header_on_channel_0", Side::broker, nothing, [] { return header(0, 1); }, 501},
    {"broker_malformed_deliver", Side::broker, nothing,
     [] {
       return raw_method(1, 60, 60, Bytes{5, 'c'});
     },
     501},
    {"broker_deliver_with_trailing_bytes", Side::broker, nothing,
     [] {
       Bytes payload = decode_frames(method(1, deliver_method("c1", 1)))[0].payload;
       payload.push_back(0);
       return frame(amqp::FrameType::method, 1, payload);
     },
     501},
    {"broker_malformed_get_ok", Side::broker, nothing,
     [] {
       return raw_method(1, 60, 71, Bytes{0, 0, 0});
     },
     501},
    {"broker_malformed_consume_ok", Side::broker, nothing,
     [] { return raw_method(1, 60, 21, Bytes{200}); }, 501},
};

class SessionMalformed : public ::testing::TestWithParam<MalformedCase> {};

std::string reply_name(std::uint16_t code) {
  return code == 501 ? "FRAME_ERROR - " : code == 505 ? "UNEXPECTED_FRAME - " : "?";
}

TEST_P(SessionMalformed, ClosesTheOffenderAndIgnoresWhatFollows) {
  const MalformedCase& c = GetParam();
  Link link;
  handshake(link);
  link.broker(deliver(2, "c2", 1));  // something outstanding, to be returned
  link.client_bytes();
  link.observer.take_events();
  Side other_side = other(c.offender);

  Bytes setup = c.setup();
  link.session.feed(c.offender, setup);
  EXPECT_EQ(link.bytes_to(other_side), setup);
  EXPECT_TRUE(link.bytes_to(c.offender).empty());
  link.observer.take_events();

  link.session.feed(c.offender, c.bad());
  std::vector<WireFrame> to_offender = decode_frames(link.bytes_to(c.offender));
  ASSERT_EQ(to_offender.size(), 1u);
  auto close = decode_as<amqp::ConnectionClose>(to_offender[0]);
  EXPECT_EQ(close.reply_code, c.code);
  EXPECT_EQ(close.reply_text.rfind(reply_name(c.code), 0), 0u) << close.reply_text;

  std::vector<WireFrame> to_other = decode_frames(link.bytes_to(other_side));
  if (c.offender == Side::broker) {
    ASSERT_EQ(to_other.size(), 1u);
    EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_other[0]).reply_code, 320);
  } else {
    EXPECT_EQ(to_other, std::vector<WireFrame>{});
  }
  EXPECT_TRUE(link.session.close_after_flush(Side::client));
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));
  EXPECT_TRUE(link.session.input_closed(Side::client));
  EXPECT_TRUE(link.session.input_closed(Side::broker));
  // Everything outstanding is returned once, the delivery on channel 2 among it.
  // A misbehaving broker is no consumer's doing: its returns are broker_lost.
  Events events = link.observer.take_events();
  const std::string cause = c.offender == Side::broker ? " broker_lost" : " connection_closed";
  EXPECT_EQ(std::count(events.begin(), events.end(), "returned ch2 b1" + cause), 1);
  for (const std::string& e : events) {
    EXPECT_TRUE(e.starts_with("returned ") && e.ends_with(cause)) << e;
  }

  link.client(method(3, amqp::ChannelOpen{}));
  link.broker(method(3, amqp::ChannelOpenOk{}));
  link.session.on_eof(Side::client);
  link.session.on_eof(Side::broker);
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_EQ(link.observer.take_events(), Events{});
}

INSTANTIATE_TEST_SUITE_P(Named, SessionMalformed, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SessionMalformedStream, FramesBeforeTheBadOneInTheSameReadPass) {
  Link link;
  handshake(link);
  Bytes good = method(1, amqp::ChannelOpen{});
  link.client(cat({good, header(1, 1), method(2, amqp::ChannelOpen{})}));
  EXPECT_EQ(link.broker_bytes(), good);
  std::vector<WireFrame> to_client = link.to_client();
  ASSERT_EQ(to_client.size(), 1u);
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_client[0]).reply_code, 505);
}

TEST(SessionMalformedStream, HeldDeliverIsDroppedWhenABodyComesInsteadOfItsHeader) {
  Link link;
  handshake(link);
  link.broker(method(1, deliver_method("c1", 1)));
  EXPECT_TRUE(link.client_bytes().empty());
  link.broker(body(1, "x"));
  std::vector<WireFrame> to_broker = link.to_broker();
  ASSERT_EQ(to_broker.size(), 1u);
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_broker[0]).reply_code, 505);
  std::vector<WireFrame> to_client = link.to_client();
  ASSERT_EQ(to_client.size(), 1u);  // the 320 close, and not the held deliver
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_client[0]).reply_code, 320);
  EXPECT_TRUE(link.observer.deliveries.empty());
}

TEST(SessionMalformedStream, FrameOfExactlyFrameMaxPasses) {
  Link link;
  handshake(link);
  std::string data(131072 - 8, 'z');
  amqp::BasicPublish publish;
  Bytes in = cat({method(1, publish), content(1, data)});
  link.client(in);
  EXPECT_EQ(link.broker_bytes(), in);
  EXPECT_FALSE(link.session.close_after_flush(Side::client));
}

TEST(SessionMalformedStream, BrokerBreakingTheHandshakeIsClosedWithoutTellingTheClient) {
  Link link;
  HandshakeFrames f = begin_handshake(link, HandshakeStep::start);
  link.broker(with_end_octet(f.tune, 0));
  std::vector<WireFrame> to_broker = link.to_broker();
  ASSERT_EQ(to_broker.size(), 1u);
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_broker[0]).reply_code, 501);
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.session.finished());
}

TEST(SessionMalformedStream, MalformedTuneOkIsAFrameError) {
  Link link;
  begin_handshake(link, HandshakeStep::tune);
  link.client(raw_method(0, 10, 31, Bytes{0x07, 0xfe}));
  std::vector<WireFrame> to_client = link.to_client();
  ASSERT_EQ(to_client.size(), 1u);
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_client[0]).reply_code, 501);
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_TRUE(link.session.finished());
}

TEST(SessionMalformedStream, MalformedTuneIsAFrameError) {
  Link link;
  begin_handshake(link, HandshakeStep::start_ok);
  link.broker(raw_method(0, 10, 30, Bytes{0x07}));
  std::vector<WireFrame> to_broker = link.to_broker();
  ASSERT_EQ(to_broker.size(), 1u);
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_broker[0]).reply_code, 501);
  EXPECT_TRUE(link.client_bytes().empty());
}

TEST(SessionMalformedStream, BadFrameSplitAcrossReadsIsCaughtOnce) {
  Link link;
  handshake(link);
  Bytes bad = with_end_octet(ack(1, 1), 0x00);
  for (std::uint8_t b : bad) link.client(Bytes{b});
  std::vector<WireFrame> to_client = link.to_client();
  ASSERT_EQ(to_client.size(), 1u);
  EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_client[0]).reply_code, 501);
  EXPECT_TRUE(link.broker_bytes().empty());
}

// The close names the malformed method as the codec does (amqp::method_name), the variant
// the peer sent included: basic.recover-async is not basic.recover, nor cancel-ok a cancel.
TEST(SessionMalformedNames, TheCloseNamesTheMethodThatWasSent) {
  struct Named {
    Side offender;
    Bytes frame;
    const char* text;
  };
  const Named cases[] = {
      {Side::client, raw_method(1, 60, 100), "FRAME_ERROR - malformed basic.recover-async"},
      {Side::client, raw_method(1, 60, 110), "FRAME_ERROR - malformed basic.recover"},
      {Side::client, raw_method(1, 60, 80, Bytes{0}), "FRAME_ERROR - malformed basic.ack"},
      {Side::broker, raw_method(1, 60, 31, Bytes{200}), "FRAME_ERROR - malformed basic.cancel-ok"},
      {Side::broker, raw_method(1, 60, 71, Bytes{0, 0, 0}), "FRAME_ERROR - malformed basic.get-ok"},
  };
  for (const Named& c : cases) {
    Link link;
    handshake(link);
    link.session.feed(c.offender, c.frame);
    std::vector<WireFrame> to_offender = decode_frames(link.bytes_to(c.offender));
    ASSERT_EQ(to_offender.size(), 1u) << c.text;
    EXPECT_EQ(decode_as<amqp::ConnectionClose>(to_offender[0]).reply_text, c.text);
  }
}

}  // namespace
}  // namespace nackguard::session::test
