// The connection handshake: protocol header, tune rewriting, and what passes untouched.

#include <gtest/gtest.h>

#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

using amqp::ConnectionTune;
using amqp::ConnectionTuneOk;

TEST(SessionHandshake, ProtocolHeaderIsForwardedByteExactOnlyWhenComplete) {
  Link link;
  Bytes header = protocol_header();
  for (std::size_t i = 0; i + 1 < header.size(); ++i) {
    link.client(ByteView(&header[i], 1));
    EXPECT_TRUE(link.broker_bytes().empty()) << "after byte " << i;
  }
  link.client(ByteView(&header.back(), 1));
  EXPECT_EQ(link.broker_bytes(), header);
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_FALSE(link.session.close_after_flush(Side::client));
  EXPECT_FALSE(link.session.close_after_flush(Side::broker));
  EXPECT_FALSE(link.session.handshake_done());
}

TEST(SessionHandshake, ProtocolHeaderAndFirstFrameInOneRead) {
  Link link;
  HandshakeFrames f = handshake_frames({}, {});
  link.client(protocol_header());
  link.broker(f.start);
  EXPECT_EQ(link.client_bytes(), f.start);
  EXPECT_EQ(link.broker_bytes(), protocol_header());
  // start-ok arrives split across two reads, the first ending mid-frame.
  link.client(ByteView(f.start_ok).first(10));
  EXPECT_TRUE(link.broker_bytes().empty());
  link.client(ByteView(f.start_ok).subspan(10));
  EXPECT_EQ(link.broker_bytes(), f.start_ok);
}

void expect_refused(Link& link) {
  EXPECT_EQ(link.client_bytes(), (Bytes{'A', 'M', 'Q', 'P', 0x00, 0x00, 0x09, 0x01}));
  EXPECT_TRUE(link.broker_bytes().empty());
  EXPECT_TRUE(link.session.close_after_flush(Side::client));
  EXPECT_TRUE(link.session.close_after_flush(Side::broker));
  EXPECT_TRUE(link.session.input_closed(Side::client));
  EXPECT_TRUE(link.session.finished());
  link.client(protocol_header());
  EXPECT_TRUE(link.client_bytes().empty());
  EXPECT_TRUE(link.broker_bytes().empty());
}

TEST(SessionHandshake, BadProtocolVersionGetsOursAndBothSidesClose) {
  Link link;
  link.client(Bytes{'A', 'M', 'Q', 'P', 0x01, 0x01, 0x00, 0x09});  // 0-8 / 0-9 style
  expect_refused(link);
}

TEST(SessionHandshake, HttpRequestIsRefusedAtTheFirstByte) {
  Link link;
  link.client(Bytes{'G'});
  expect_refused(link);
}

TEST(SessionHandshake, BadHeaderByteArrivingLateIsRefused) {
  Link link;
  Bytes bad = {'A', 'M', 'Q', 'P', 0x00, 0x00, 0x09, 0x02};
  for (std::uint8_t b : bad) link.client(Bytes{b});
  expect_refused(link);
}

// The tune pair: the client is offered one channel less than the broker's limit (the last is
// the proxy's), the broker hears of the client's limit plus that one, frame_max is capped by
// SessionOptions::max_frame_bytes (1 MiB unless set) and the heartbeat is the client's answer.
// The session keeps what the broker heard: its reserved channel, frame_max and heartbeat.
struct TuneCase {
  const char* name;
  std::uint32_t max_frame_bytes;
  HandshakeParams params;
  ConnectionTune client_saw;    // the tune the proxy wrote to the client
  ConnectionTuneOk broker_saw;  // the tune-ok the proxy wrote to the broker
};

const TuneCase kTuneCases[] = {
    {"the client took the offer; the broker hears of one channel more: the proxy's",
     1048576,
     {.broker_channel_max = 2047, .broker_frame_max = 131072, .broker_heartbeat = 60},
     {2046, 131072, 60},
     {{2047, 131072, 60}}},
    {"a broker without channel limit offers 65534",
     1048576,
     {.broker_channel_max = 0, .client_channel_max = 0},
     {65534, 131072, 60},
     {{65535, 131072, 60}}},
    {"the client's limit plus one reaches the broker",
     1048576,
     {.client_channel_max = 100},
     {2046, 131072, 60},
     {{101, 131072, 60}}},
    {"a client without channel limit gets the offer",
     1048576,
     {.client_channel_max = 0},
     {2046, 131072, 60},
     {{2047, 131072, 60}}},
    {"a client asking more than offered is held to the offer",
     1048576,
     {.client_channel_max = 2047},
     {2046, 131072, 60},
     {{2047, 131072, 60}}},
    {"a broker with two channels leaves the client one",
     1048576,
     {.broker_channel_max = 2},
     {1, 131072, 60},
     {{2, 131072, 60}}},
    // The client's "no limit" would let the broker send anything: the cap goes instead.
    {"a broker without frame limit is capped by the options",
     65536,
     {.broker_frame_max = 0, .client_frame_max = 0},
     {2046, 65536, 60},
     {{2047, 65536, 60}}},
    {"a broker above the cap is capped",
     1048576,
     {.broker_frame_max = 16u << 20},
     {2046, 1048576, 60},
     {{2047, 1048576, 60}}},
    {"a client asking above the cap is capped",
     65536,
     {.broker_frame_max = 131072, .client_frame_max = 131072},
     {2046, 65536, 60},
     {{2047, 65536, 60}}},
    {"a client below the offer keeps its frame_max",
     1048576,
     {.client_frame_max = 8192},
     {2046, 131072, 60},
     {{2047, 8192, 60}}},
    {"the heartbeat is the client's answer",
     1048576,
     {.broker_heartbeat = 60, .client_heartbeat = 15},
     {2046, 131072, 60},
     {{2047, 131072, 15}}},
};

TEST(SessionHandshake, TheTunePairIsRewrittenForTheReservedChannelAndTheFrameCap) {
  for (const TuneCase& c : kTuneCases) {
    SCOPED_TRACE(c.name);
    Link link(SessionOptions{.max_frame_bytes = c.max_frame_bytes});
    HandshakeResult r = handshake(link, c.params);
    EXPECT_EQ(r.client_saw.channel_max, c.client_saw.channel_max);
    EXPECT_EQ(r.client_saw.frame_max, c.client_saw.frame_max);
    EXPECT_EQ(r.client_saw.heartbeat, c.client_saw.heartbeat);
    EXPECT_EQ(r.broker_saw.channel_max, c.broker_saw.channel_max);
    EXPECT_EQ(r.broker_saw.frame_max, c.broker_saw.frame_max);
    EXPECT_EQ(r.broker_saw.heartbeat, c.broker_saw.heartbeat);
    EXPECT_EQ(link.session.reserved_channel(),
              std::optional<std::uint16_t>(c.broker_saw.channel_max));
    EXPECT_EQ(link.session.frame_max(), c.broker_saw.frame_max);
    EXPECT_EQ(link.session.heartbeat_seconds(), c.broker_saw.heartbeat);
  }
}

TEST(SessionHandshake, BrokerWithOneChannelIsNotReservedAndTuneIsUnchanged) {
  Link link;
  HandshakeParams p{.broker_channel_max = 1, .broker_frame_max = 131072, .broker_heartbeat = 60};
  HandshakeFrames f = begin_handshake(link, HandshakeStep::start_ok, p);

  link.broker(f.tune);
  EXPECT_EQ(link.client_bytes(), f.tune);
  Bytes tune_ok = method(0, ConnectionTuneOk{{1, 131072, 60}});
  link.client(tune_ok);
  EXPECT_EQ(link.broker_bytes(), tune_ok);
  EXPECT_EQ(link.session.reserved_channel(), std::nullopt);

  link.client(f.open);
  link.broker(f.open_ok);
  EXPECT_TRUE(link.session.is_open());
  // Channel 1 is the client's: it passes.
  Bytes open = method(1, amqp::ChannelOpen{});
  link.client(open);
  EXPECT_EQ(link.broker_bytes(), cat({f.open, open}));
}

TEST(SessionHandshake, OtherHandshakeMethodsPassAsTheirOriginalBytes) {
  Link link;
  HandshakeFrames f = handshake_frames({.vhost = "/prod"}, {});
  // A start-ok whose table RabbitMQ would spell differently if it were re-encoded: 'x' bytes
  // and an 's' int16 next to the usual fields.
  amqp::ConnectionStartOk start_ok = decode_as<amqp::ConnectionStartOk>(frames({f.start_ok})[0]);
  start_ok.client_properties.set("blob", amqp::FieldValue::bytes("\x01\x02"));
  Bytes start_ok_bytes = method(0, start_ok);
  Bytes secure = raw_method(0, 10, 20, Bytes{0, 0, 0, 2, 'h', 'i'});
  Bytes secure_ok = raw_method(0, 10, 21, Bytes{0, 0, 0, 2, 'o', 'k'});

  link.client(protocol_header());
  link.broker(f.start);
  link.client(start_ok_bytes);
  link.broker(secure);
  link.client(secure_ok);
  EXPECT_EQ(link.client_bytes(), cat({f.start, secure}));
  EXPECT_EQ(link.broker_bytes(), cat({protocol_header(), start_ok_bytes, secure_ok}));

  link.broker(f.tune);
  link.client(method(0, ConnectionTuneOk{{2046, 131072, 60}}));
  link.client_bytes();
  link.broker_bytes();
  EXPECT_FALSE(link.session.handshake_done());
  EXPECT_FALSE(link.session.is_open());

  link.client(f.open);
  EXPECT_EQ(link.broker_bytes(), f.open);
  EXPECT_EQ(link.session.vhost(), "/prod");
  EXPECT_TRUE(link.observer.opens.empty());
  link.broker(f.open_ok);
  EXPECT_EQ(link.client_bytes(), f.open_ok);
  EXPECT_TRUE(link.session.is_open());
  EXPECT_TRUE(link.session.handshake_done());
  EXPECT_EQ(link.observer.take_events(), std::vector<std::string>{"open /prod"});
}

TEST(SessionHandshake, AuthFailureCloseAndCloseOkEndTheSession) {
  Link link;
  begin_handshake(link, HandshakeStep::start_ok);
  const amqp::ConnectionClose close =
      connection_close_method(403, "ACCESS_REFUSED - Login was refused");
  Bytes close_bytes = method(0, close);
  link.broker(close_bytes);
  EXPECT_EQ(link.client_bytes(), close_bytes);
  EXPECT_FALSE(link.session.finished());
  Bytes close_ok = method(0, amqp::ConnectionCloseOk{});
  link.client(close_ok);
  EXPECT_EQ(link.broker_bytes(), close_ok);
  EXPECT_TRUE(link.session.finished());
  EXPECT_TRUE(link.observer.events.empty());
}

TEST(SessionHandshake, StatsCountFramesAndBytesPerSide) {
  Link link;
  handshake(link);
  HandshakeFrames f = handshake_frames({}, {});
  const SessionStats& stats = link.session.stats();
  // Client: start-ok, tune-ok, open. Broker: start, tune, open-ok.
  EXPECT_EQ(stats.frames[0], 3u);
  EXPECT_EQ(stats.frames[1], 3u);
  Bytes tune_ok = method(0, ConnectionTuneOk{{2046, 131072, 60}});
  EXPECT_EQ(stats.bytes[0], f.start_ok.size() + tune_ok.size() + f.open.size());
  EXPECT_EQ(stats.bytes[1], f.start.size() + f.tune.size() + f.open_ok.size());
}

}  // namespace
}  // namespace nackguard::session::test
