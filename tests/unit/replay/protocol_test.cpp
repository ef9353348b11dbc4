// The replay client's protocol core without a socket: the handshake as frames in and bytes
// out, content reassembly, and the frames of a publish.
#include "proxy/replay/protocol.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "amqp/codec_test_support.hpp"
#include "proxy/amqp/method_codec.hpp"

namespace nackguard::replay {
namespace {

using amqp::Bytes;
using amqp::Frame;

// Splits bytes into frames; every byte must belong to a whole frame.
std::vector<Frame> frames_of(const Bytes& bytes) {
  amqp::FrameDecoder decoder(1 << 20);
  std::vector<Frame> frames;
  amqp::ByteView rest(bytes);
  while (!rest.empty()) {
    amqp::FrameResult result = decoder.decode(rest);
    EXPECT_EQ(result.status, amqp::FrameResult::Status::frame);
    if (result.status != amqp::FrameResult::Status::frame) break;
    frames.push_back(result.frame);
    rest = rest.subspan(result.frame.raw.size());
  }
  return frames;
}

template <typename M>
Bytes method_frame(const M& method, std::uint16_t channel = 0) {
  Bytes out;
  EXPECT_TRUE(amqp::append_method_frame(out, channel, method));
  return out;
}

template <typename M>
M decode_as(const Frame& frame) {
  M method;
  EXPECT_EQ(amqp::decode_method(frame.payload, method), amqp::MethodError::none);
  return method;
}

amqp::ConnectionStart rabbit_start(std::string mechanisms = "AMQPLAIN PLAIN") {
  amqp::ConnectionStart start;
  start.server_properties.set("product", amqp::FieldValue::string("RabbitMQ"));
  start.mechanisms = std::move(mechanisms);
  start.locales = "en_US";
  return start;
}

amqp::ConnectionTune rabbit_tune() {
  amqp::ConnectionTune tune;
  tune.channel_max = 2047;
  tune.frame_max = 131072;
  tune.heartbeat = 60;
  return tune;
}

HandshakeParams params() {
  HandshakeParams p;
  p.user = "bob";
  p.password = "s3cret";
  p.vhost = "/prod";
  p.endpoint = "rabbit:5672";
  return p;
}

// Feeds one frame's bytes to the handshake and returns what it sends back.
Bytes feed(Handshake& handshake, const Bytes& frame_bytes) {
  Bytes out;
  std::vector<Frame> frames = frames_of(frame_bytes);
  EXPECT_EQ(frames.size(), 1u);
  handshake.on_frame(frames.at(0), out);
  return out;
}

TEST(Handshake, BeginsWithTheProtocolHeader) {
  Handshake handshake(params());
  Bytes out;
  handshake.begin(out);
  EXPECT_EQ(amqp::test::as_hex(out),
            amqp::test::as_hex(amqp::test::hex("41 4d 51 50 00 00 09 01")));
}

TEST(Handshake, LogsInWithPlainAndOpensTheVhost) {
  Handshake handshake(params());
  Bytes out = feed(handshake, method_frame(rabbit_start()));
  ASSERT_EQ(handshake.state(), Handshake::State::awaiting_tune);
  std::vector<Frame> sent = frames_of(out);
  ASSERT_EQ(sent.size(), 1u);
  auto start_ok = decode_as<amqp::ConnectionStartOk>(sent[0]);
  EXPECT_EQ(start_ok.mechanism, "PLAIN");
  EXPECT_EQ(start_ok.response, std::string("\0bob\0s3cret", 11));
  const amqp::FieldValue* capabilities = start_ok.client_properties.find("capabilities");
  ASSERT_NE(capabilities, nullptr);
  const auto& table = std::get<amqp::FieldTable>(capabilities->value);
  EXPECT_EQ(*table.find("authentication_failure_close"), amqp::FieldValue::boolean(true));

  out = feed(handshake, method_frame(rabbit_tune()));
  ASSERT_EQ(handshake.state(), Handshake::State::awaiting_open_ok);
  sent = frames_of(out);
  ASSERT_EQ(sent.size(), 2u);
  auto tune_ok = decode_as<amqp::ConnectionTuneOk>(sent[0]);
  EXPECT_EQ(tune_ok.channel_max, 1);
  EXPECT_EQ(tune_ok.frame_max, 131072u);
  EXPECT_EQ(tune_ok.heartbeat, 60);
  EXPECT_EQ(decode_as<amqp::ConnectionOpen>(sent[1]).virtual_host, "/prod");

  out = feed(handshake, method_frame(amqp::ConnectionOpenOk{}));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(handshake.state(), Handshake::State::done);
  EXPECT_EQ(handshake.tuning().frame_max, 131072u);
  EXPECT_EQ(handshake.tuning().heartbeat, 60);
}

TEST(Handshake, IgnoresHeartbeats) {
  Handshake handshake(params());
  feed(handshake, method_frame(rabbit_start()));
  Bytes heartbeat;
  amqp::append_heartbeat(heartbeat);
  EXPECT_TRUE(feed(handshake, heartbeat).empty());
  EXPECT_EQ(handshake.state(), Handshake::State::awaiting_tune);
}

struct TuneCase {
  const char* name;
  amqp::ConnectionTune offer;
  std::uint16_t max_heartbeat;
  Tuning expected;
};

void PrintTo(const TuneCase& c, std::ostream* os) {
  *os << c.name;
}

class NegotiateTest : public testing::TestWithParam<TuneCase> {};

TEST_P(NegotiateTest, HonoursTheBrokersLimits) {
  const TuneCase& c = GetParam();
  Tuning t = Handshake::negotiate(c.offer, c.max_heartbeat, 131072);
  EXPECT_EQ(t.channel_max, c.expected.channel_max);
  EXPECT_EQ(t.frame_max, c.expected.frame_max);
  EXPECT_EQ(t.heartbeat, c.expected.heartbeat);
}

INSTANTIATE_TEST_SUITE_P(
    Offers, NegotiateTest,
    testing::Values(TuneCase{"rabbit_defaults", {2047, 131072, 60}, 60, {1, 131072, 60}},
                    TuneCase{"no_limits", {0, 0, 0}, 60, {1, 131072, 0}},
                    TuneCase{"small_frames", {0, 4096, 0}, 60, {1, 4096, 0}},
                    TuneCase{"larger_frames_capped", {0, 1 << 20, 0}, 60, {1, 131072, 0}},
                    TuneCase{"short_heartbeat", {0, 0, 10}, 60, {1, 131072, 10}},
                    TuneCase{"long_heartbeat_capped", {0, 0, 600}, 60, {1, 131072, 60}},
                    TuneCase{"heartbeats_off_by_us", {0, 0, 60}, 0, {1, 131072, 0}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Handshake, RefusedLoginIsOneClearLine) {
  Handshake handshake(params());
  feed(handshake, method_frame(rabbit_start()));
  amqp::ConnectionClose close;
  close.reply_code = 403;
  close.reply_text = "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN.";
  Bytes out = feed(handshake, method_frame(close));
  EXPECT_EQ(handshake.state(), Handshake::State::failed);
  EXPECT_EQ(handshake.close_code(), 403);
  EXPECT_EQ(handshake.error(),
            "rabbit:5672 refused the login of user 'bob': check the user name and password "
            "(403 ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN.)");
  EXPECT_EQ(handshake.error().find("s3cret"), std::string::npos);
  std::vector<Frame> sent = frames_of(out);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(amqp::peek_method_key(sent[0].payload), amqp::mid::connection_close_ok);
}

TEST(Handshake, RefusedVhostNamesIt) {
  Handshake handshake(params());
  feed(handshake, method_frame(rabbit_start()));
  feed(handshake, method_frame(rabbit_tune()));
  amqp::ConnectionClose close;
  close.reply_code = 530;
  close.reply_text = "NOT_ALLOWED - vhost /prod not found";
  feed(handshake, method_frame(close));
  EXPECT_EQ(handshake.state(), Handshake::State::failed);
  EXPECT_EQ(handshake.error(),
            "rabbit:5672 refused vhost '/prod' for user 'bob' (530 NOT_ALLOWED - vhost /prod not "
            "found)");
}

struct BadStep {
  const char* name;
  std::vector<Bytes> frames;
  const char* message_part;
};

void PrintTo(const BadStep& c, std::ostream* os) {
  *os << c.name;
}

class HandshakeFailureTest : public testing::TestWithParam<BadStep> {};

TEST_P(HandshakeFailureTest, Fails) {
  const BadStep& c = GetParam();
  Handshake handshake(params());
  for (const Bytes& frame : c.frames) feed(handshake, frame);
  EXPECT_EQ(handshake.state(), Handshake::State::failed);
  EXPECT_NE(handshake.error().find(c.message_part), std::string::npos) << handshake.error();
  Bytes out;
  std::vector<Frame> more = frames_of(method_frame(amqp::ConnectionOpenOk{}));
  handshake.on_frame(more[0], out);  // a failed handshake stays failed
  EXPECT_EQ(handshake.state(), Handshake::State::failed);
}

amqp::ConnectionStart start_08() {
  amqp::ConnectionStart start = rabbit_start();
  start.version_minor = 8;
  return start;
}

amqp::ConnectionTune tiny_frames() {
  amqp::ConnectionTune tune;
  tune.frame_max = 512;
  return tune;
}

Bytes body_frame() {
  Bytes out;
  amqp::append_frame(out, amqp::FrameType::body, 0, amqp::test::ascii("x"));
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Steps, HandshakeFailureTest,
    testing::Values(
        BadStep{"no_plain", {method_frame(rabbit_start("AMQPLAIN EXTERNAL"))}, "SASL PLAIN"},
        BadStep{"wrong_version", {method_frame(start_08())}, "not 0-9-1"},
        BadStep{"tune_before_start", {method_frame(rabbit_tune())}, "out of order"},
        BadStep{"open_ok_before_tune",
                {method_frame(rabbit_start()), method_frame(amqp::ConnectionOpenOk{})},
                "out of order"},
        BadStep{"secure_challenge",
                {method_frame(rabbit_start()),
                 amqp::test::hex("01 0000 00000008  000a 0014 00000000 ce")},
                "SASL challenge"},
        BadStep{"unexpected_method",
                {method_frame(rabbit_start()), method_frame(amqp::ConnectionBlocked{"x"})},
                "out of order"},
        BadStep{"frame_max_too_small",
                {method_frame(rabbit_start()), method_frame(tiny_frames())},
                "below AMQP's minimum"},
        BadStep{"method_on_a_channel", {method_frame(rabbit_start(), 1)}, "unexpected frame"},
        BadStep{"body_frame", {body_frame()}, "unexpected frame"},
        BadStep{"truncated_start",
                {amqp::test::hex("01 00 00 00 00 00 04 00 0a 00 0a ce")},
                "malformed connection.start"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- content reassembly ----

Bytes header_frame(std::uint64_t body_size, std::uint16_t channel = 1) {
  amqp::ContentHeader header;
  header.body_size = body_size;
  header.properties.message_id = "m-1";
  Bytes out;
  EXPECT_TRUE(amqp::append_content_header_frame(out, channel, header));
  return out;
}

Bytes body(std::string_view text, std::uint16_t channel = 1) {
  Bytes out;
  amqp::append_frame(out, amqp::FrameType::body, channel, amqp::as_bytes(text));
  return out;
}

Bytes get_ok() {
  amqp::BasicGetOk ok;
  ok.delivery_tag = 7;
  ok.message_count = 3;
  return method_frame(ok, 1);
}

// Feeds frames; returns the units that came out, and the first error.
struct Assembled {
  std::vector<Inbound> units;
  std::string error;
};

Assembled assemble(const std::vector<Bytes>& frames) {
  InboundAssembler assembler;
  Assembled result;
  for (const Bytes& bytes : frames) {
    for (const Frame& frame : frames_of(bytes)) {
      InboundAssembler::Result r = assembler.on_frame(frame);
      if (!r.error.empty() && result.error.empty()) result.error = r.error;
      if (r.unit) result.units.push_back(std::move(*r.unit));
    }
  }
  return result;
}

TEST(InboundAssembler, AMethodWithoutContentIsAUnitAtOnce) {
  Assembled a = assemble({method_frame(amqp::BasicGetEmpty{}, 1)});
  ASSERT_EQ(a.units.size(), 1u);
  EXPECT_EQ(a.units[0].kind, Inbound::Kind::method);
  EXPECT_EQ(a.units[0].method_key, amqp::mid::basic_get_empty);
  EXPECT_EQ(a.units[0].channel, 1);
}

TEST(InboundAssembler, JoinsAMessageFromItsFrames) {
  Assembled a = assemble({get_ok(), header_frame(11), body("hello "), body("world")});
  ASSERT_TRUE(a.error.empty()) << a.error;
  ASSERT_EQ(a.units.size(), 1u);
  const Inbound& unit = a.units[0];
  EXPECT_EQ(unit.kind, Inbound::Kind::content);
  EXPECT_EQ(unit.method_key, amqp::mid::basic_get_ok);
  EXPECT_EQ(decode_as<amqp::BasicGetOk>(frames_of(get_ok())[0]).delivery_tag, 7u);
  EXPECT_EQ(unit.header.properties.message_id, "m-1");
  EXPECT_EQ(std::string(amqp::as_chars(unit.body)), "hello world");
}

TEST(InboundAssembler, AnEmptyBodyEndsAtTheHeader) {
  Assembled a = assemble({get_ok(), header_frame(0), method_frame(amqp::BasicGetEmpty{}, 1)});
  ASSERT_EQ(a.units.size(), 2u);
  EXPECT_TRUE(a.units[0].body.empty());
  EXPECT_EQ(a.units[1].method_key, amqp::mid::basic_get_empty);
}

TEST(InboundAssembler, HeartbeatsPassBetweenContentFrames) {
  Bytes heartbeat;
  amqp::append_heartbeat(heartbeat);
  Assembled a = assemble({get_ok(), heartbeat, header_frame(2), heartbeat, body("ok")});
  ASSERT_EQ(a.units.size(), 3u);
  EXPECT_EQ(a.units[0].kind, Inbound::Kind::heartbeat);
  EXPECT_EQ(a.units[2].kind, Inbound::Kind::content);
}

struct BadSequence {
  const char* name;
  std::vector<Bytes> frames;
  const char* message_part;
};

void PrintTo(const BadSequence& c, std::ostream* os) {
  *os << c.name;
}

class AssemblerErrorTest : public testing::TestWithParam<BadSequence> {};

TEST_P(AssemblerErrorTest, IsAnError) {
  Assembled a = assemble(GetParam().frames);
  EXPECT_NE(a.error.find(GetParam().message_part), std::string::npos) << a.error;
}

Bytes huge_header() {
  return header_frame(kMaxBodyBytes + 1);
}

INSTANTIATE_TEST_SUITE_P(
    Sequences, AssemblerErrorTest,
    testing::Values(
        BadSequence{"header_without_method", {header_frame(1)}, "without the method"},
        BadSequence{"body_without_method", {body("x")}, "without the method"},
        BadSequence{"body_before_header", {get_ok(), body("x")}, "before the content header"},
        BadSequence{"method_inside_content",
                    {get_ok(), header_frame(5), method_frame(amqp::BasicGetEmpty{}, 1)},
                    "inside a message"},
        BadSequence{"body_too_long", {get_ok(), header_frame(2), body("xyz")}, "longer"},
        BadSequence{"two_headers", {get_ok(), header_frame(2), header_frame(2)}, "second"},
        BadSequence{"other_channel", {get_ok(), header_frame(2, 2)}, "without the method"},
        BadSequence{"huge_body", {get_ok(), huge_header()}, "512 MiB"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- publish ----

TEST(AppendPublish, CutsTheBodyToFrameMaxAndReassemblesExactly) {
  amqp::BasicPublish publish;
  publish.routing_key = "orders";
  publish.mandatory = true;
  amqp::ContentHeader header;
  header.body_size = 999;  // replaced by the body's real size
  header.properties.message_id = "m-9";
  Bytes payload(10000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 7);

  Bytes out;
  ASSERT_TRUE(append_publish(out, 1, publish, header, payload, 4096));
  std::vector<Frame> frames = frames_of(out);
  ASSERT_EQ(frames.size(), 5u);
  auto method = decode_as<amqp::BasicPublish>(frames[0]);
  EXPECT_EQ(method.exchange, "");
  EXPECT_EQ(method.routing_key, "orders");
  EXPECT_TRUE(method.mandatory);
  for (const Frame& frame : frames) {
    EXPECT_EQ(frame.channel, 1);
    EXPECT_LE(frame.raw.size(), 4096u);
  }
  EXPECT_EQ(frames[2].payload.size(), 4096u - 8);
  EXPECT_EQ(frames[4].payload.size(), 10000u - 2 * (4096 - 8));

  // The publish's frames, read as a get-ok's, give back the same header and body.
  Assembled a = assemble({out});
  ASSERT_EQ(a.units.size(), 1u);
  EXPECT_EQ(a.units[0].header.body_size, 10000u);
  EXPECT_EQ(a.units[0].header.properties, header.properties);
  EXPECT_EQ(a.units[0].body, payload);
}

TEST(AppendPublish, AnEmptyBodyHasNoBodyFrame) {
  Bytes out;
  ASSERT_TRUE(append_publish(out, 1, amqp::BasicPublish{}, amqp::ContentHeader{}, {}, 4096));
  EXPECT_EQ(frames_of(out).size(), 2u);
}

TEST(DescribeReply, IsTheCodeAndTheBrokersText) {
  EXPECT_EQ(describe_reply(404, "NOT_FOUND - no queue 'q' in vhost '/'"),
            "404 NOT_FOUND - no queue 'q' in vhost '/'");
}

}  // namespace
}  // namespace nackguard::replay
