// The protocol header check and the incremental frame decoder: exact frames both ways,
// byte-by-byte feeding with trailing garbage left alone, and each FrameError as a named case.
#include "proxy/amqp/frame.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "amqp/codec_test_support.hpp"
#include "amqp/error_text_check.hpp"

namespace nackguard::amqp {
namespace {

using namespace test;

using Status = FrameResult::Status;

const Bytes kGarbage = hex("de ad be ef 01 00");

// A frame, and its exact bytes.
struct FrameCase {
  const char* name;
  FrameType type;
  std::uint16_t channel;
  Bytes payload;
  Bytes bytes;
};

void PrintTo(const FrameCase& c, std::ostream* os) {
  *os << c.name;
}

const FrameCase kFrames[] = {
    {"method_basic_ack", FrameType::method, 1, hex("00 3c 00 50 00 00 00 00 00 00 00 05 00"),
     hex("01 00 01 00 00 00 0d  00 3c 00 50 00 00 00 00 00 00 00 05 00  ce")},
    {"header_no_properties", FrameType::header, 2, hex("00 3c 00 00 00 00 00 00 00 00 00 03 00 00"),
     hex("02 00 02 00 00 00 0e  00 3c 00 00 00 00 00 00 00 00 00 03 00 00  ce")},
    {"body", FrameType::body, 0x0102, ascii("abc"), hex("03 01 02 00 00 00 03  61 62 63  ce")},
    {"body_empty", FrameType::body, 1, {}, hex("03 00 01 00 00 00 00  ce")},
    {"body_of_end_octets", FrameType::body, 1, hex("ce ce"),
     hex("03 00 01 00 00 00 02  ce ce  ce")},
    {"body_on_channel_65535", FrameType::body, 65535, hex("00"),
     hex("03 ff ff 00 00 00 01  00  ce")},
    {"heartbeat", FrameType::heartbeat, 0, {}, hex("08 00 00 00 00 00 00  ce")},
};

class FrameBothWays : public ::testing::TestWithParam<FrameCase> {};

TEST_P(FrameBothWays, AppendFrameWritesTheBytes) {
  Bytes out = hex("aa");  // appends, keeping what was there
  append_frame(out, GetParam().type, GetParam().channel, GetParam().payload);
  EXPECT_EQ(as_hex(out), as_hex(cat({hex("aa"), GetParam().bytes})));
}

TEST_P(FrameBothWays, DecodesFromTheBytes) {
  const Bytes& wire = GetParam().bytes;
  FrameResult result = FrameDecoder().decode(wire);
  ASSERT_EQ(result.status, Status::frame);
  EXPECT_EQ(result.frame.frame_type(), GetParam().type);
  EXPECT_EQ(result.frame.type, static_cast<std::uint8_t>(GetParam().type));
  EXPECT_EQ(result.frame.channel, GetParam().channel);
  EXPECT_EQ(as_hex(result.frame.payload), as_hex(GetParam().payload));
  EXPECT_EQ(result.frame.raw.data(), wire.data());  // views into the input, no copy
  EXPECT_EQ(result.frame.raw.size(), wire.size());
  EXPECT_EQ(result.frame.payload.data(), wire.data() + kFrameHeaderSize);
}

// One byte at a time with garbage after the frame: need_more until the last byte of the
// frame, then the frame, whose raw bytes stop where the frame does.
TEST_P(FrameBothWays, ByteByByteWithTrailingGarbage) {
  const Bytes& frame = GetParam().bytes;
  Bytes wire = cat({frame, kGarbage});
  FrameDecoder decoder;
  for (std::size_t n = 0; n < frame.size(); ++n) {
    FrameResult result = decoder.decode(ByteView(wire).first(n));
    EXPECT_EQ(result.status, Status::need_more) << "after " << n << " bytes";
    EXPECT_EQ(result.error, FrameError::none);
  }
  for (std::size_t n = frame.size(); n <= wire.size(); ++n) {
    FrameResult result = decoder.decode(ByteView(wire).first(n));
    ASSERT_EQ(result.status, Status::frame) << "after " << n << " bytes";
    EXPECT_EQ(result.frame.raw.size(), frame.size());
    EXPECT_EQ(as_hex(result.frame.payload), as_hex(GetParam().payload));
  }
  EXPECT_EQ(as_hex(ByteView(wire).subspan(frame.size())), as_hex(kGarbage));
}

INSTANTIATE_TEST_SUITE_P(Cases, FrameBothWays, ::testing::ValuesIn(kFrames),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FrameStream, BackToBackFramesComeOutInOrder) {
  Bytes wire;
  for (const auto& c : kFrames) wire.insert(wire.end(), c.bytes.begin(), c.bytes.end());
  wire.insert(wire.end(), kGarbage.begin(), kGarbage.begin() + 3);  // a partial header

  FrameDecoder decoder;
  ByteView rest(wire);
  for (const auto& c : kFrames) {
    FrameResult result = decoder.decode(rest);
    ASSERT_EQ(result.status, Status::frame) << c.name;
    EXPECT_EQ(result.frame.channel, c.channel) << c.name;
    EXPECT_EQ(as_hex(result.frame.raw), as_hex(c.bytes)) << c.name;
    rest = rest.subspan(result.frame.raw.size());
  }
  EXPECT_EQ(decoder.decode(rest).status, Status::need_more);
  EXPECT_EQ(rest.size(), 3u);
}

// The whole stream fed one byte at a time into a growing buffer, as a socket might.
TEST(FrameStream, BackToBackFramesOneByteAtATime) {
  Bytes wire;
  for (const auto& c : kFrames) wire.insert(wire.end(), c.bytes.begin(), c.bytes.end());

  FrameDecoder decoder;
  Bytes buffer;
  std::vector<Bytes> decoded;
  for (std::uint8_t byte : wire) {
    buffer.push_back(byte);
    FrameResult result = decoder.decode(buffer);
    ASSERT_NE(result.status, Status::error);
    if (result.status == Status::frame) {
      decoded.emplace_back(result.frame.raw.begin(), result.frame.raw.end());
      buffer.erase(buffer.begin(),
                   buffer.begin() + static_cast<std::ptrdiff_t>(result.frame.raw.size()));
    }
  }
  EXPECT_TRUE(buffer.empty());
  ASSERT_EQ(decoded.size(), std::size(kFrames));
  for (std::size_t i = 0; i < decoded.size(); ++i) {
    EXPECT_EQ(as_hex(decoded[i]), as_hex(kFrames[i].bytes));
  }
}

// A body frame whose whole size (header, payload, end octet) is `total`.
Bytes body_frame_of_total_size(std::size_t total) {
  Bytes out;
  append_frame(out, FrameType::body, 1, Bytes(total - kFrameOverhead, 0x61));
  return out;
}

// A frame of frame_max bytes, or one less, is accepted whole; one byte more is too large as
// soon as its header arrives.
TEST(FrameMax, UpToFrameMaxIsAcceptedAndOneMoreIsTooLargeAtItsHeader) {
  FrameDecoder decoder(4096);
  for (std::size_t total : {std::size_t{4096}, std::size_t{4095}}) {
    SCOPED_TRACE(total);
    Bytes wire = body_frame_of_total_size(total);
    FrameResult result = decoder.decode(wire);
    ASSERT_EQ(result.status, Status::frame);
    EXPECT_EQ(result.frame.raw.size(), total);
  }
  Bytes wire = body_frame_of_total_size(4097);
  FrameResult result = decoder.decode(ByteView(wire).first(kFrameHeaderSize));
  ASSERT_EQ(result.status, Status::error);
  EXPECT_EQ(result.error, FrameError::too_large);
}

// With frame_max lowered by one, the frame that was exactly at the limit is one over it.
TEST(FrameMax, FrameMaxMinusOneRefusesWhatFrameMaxAccepted) {
  Bytes wire = body_frame_of_total_size(4096);
  FrameDecoder decoder(4096);
  EXPECT_EQ(decoder.decode(wire).status, Status::frame);
  decoder.set_frame_max(4095);
  EXPECT_EQ(decoder.frame_max(), 4095u);
  FrameResult result = decoder.decode(wire);
  ASSERT_EQ(result.status, Status::error);
  EXPECT_EQ(result.error, FrameError::too_large);
}

TEST(FrameMax, DefaultIsTheSpecMinimum) {
  EXPECT_EQ(FrameDecoder().frame_max(), kFrameMinSize);
  EXPECT_EQ(FrameDecoder().decode(body_frame_of_total_size(4096)).status, Status::frame);
  EXPECT_EQ(FrameDecoder().decode(body_frame_of_total_size(4097)).status, Status::error);
}

TEST(FrameMax, FrameMaxSmallerThanTheOverheadRefusesEverything) {
  Bytes heartbeat;
  append_heartbeat(heartbeat);
  EXPECT_EQ(FrameDecoder(8).decode(heartbeat).status, Status::frame);
  EXPECT_EQ(FrameDecoder(7).decode(heartbeat).error, FrameError::too_large);
  EXPECT_EQ(FrameDecoder(0).decode(heartbeat).error, FrameError::too_large);
}

// Errors as named cases: the bytes given are all the decoder gets, so the ones that stop at
// the 7-byte header show that the error does not wait for the payload.
struct FrameErrorCase {
  const char* name;
  Bytes bytes;
  std::uint32_t frame_max;
  FrameError expected;
};

void PrintTo(const FrameErrorCase& c, std::ostream* os) {
  *os << c.name;
}

class FrameErrors : public ::testing::TestWithParam<FrameErrorCase> {};

TEST_P(FrameErrors, AreReportedByName) {
  FrameResult result = FrameDecoder(GetParam().frame_max).decode(GetParam().bytes);
  ASSERT_EQ(result.status, Status::error);
  EXPECT_EQ(result.error, GetParam().expected);
}

constexpr FrameError kTooLarge = FrameError::too_large;
constexpr FrameError kBadEndOctet = FrameError::bad_end_octet;
constexpr FrameError kUnknownType = FrameError::unknown_type;
constexpr FrameError kBadHeartbeat = FrameError::bad_heartbeat;

const FrameErrorCase kFrameErrorCases[] = {
    {"too_large_at_header_only", hex("01 00 01 00 01 00 00"), 4096, kTooLarge},
    {"too_large_size_ffffffff", hex("03 00 01 ff ff ff ff"), 131072, kTooLarge},
    {"too_large_size_fffffff8_max_ffffffff", hex("03 00 01 ff ff ff f8"), 0xFFFFFFFF, kTooLarge},
    {"too_large_by_one_byte", hex("03 00 01 00 00 0f f9"), 4096, kTooLarge},
    {"too_large_heartbeat_size", hex("08 00 00 ff ff ff ff"), 4096, kTooLarge},
    {"bad_end_octet_zero", hex("01 00 00 00 00 00 00 00"), 4096, kBadEndOctet},
    {"bad_end_octet_cf", hex("03 00 01 00 00 00 01 ce cf"), 4096, kBadEndOctet},
    {"bad_end_octet_payload_one_short", hex("03 00 01 00 00 00 02 61 ce 00"), 4096, kBadEndOctet},
    {"unknown_type_0", hex("00 00 00 00 00 00 00"), 4096, kUnknownType},
    {"unknown_type_4", hex("04 00 01 00 00 00 00"), 4096, kUnknownType},
    {"unknown_type_9", hex("09 00 01 00 00 00 00"), 4096, kUnknownType},
    {"unknown_type_255", hex("ff 00 01 00 00 00 00"), 4096, kUnknownType},
    {"unknown_type_A_of_a_protocol_header", hex("41 4d 51 50 00 00 09 01"), 4096, kUnknownType},
    {"heartbeat_with_payload", hex("08 00 00 00 00 00 01 00 ce"), 4096, kBadHeartbeat},
    {"heartbeat_with_payload_header_only", hex("08 00 00 00 00 00 01"), 4096, kBadHeartbeat},
    {"heartbeat_on_channel_1", hex("08 00 01 00 00 00 00 ce"), 4096, kBadHeartbeat},
    {"heartbeat_on_channel_1_header_only", hex("08 00 01 00 00 00 00"), 4096, kBadHeartbeat},
};

INSTANTIATE_TEST_SUITE_P(Cases, FrameErrors, ::testing::ValuesIn(kFrameErrorCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FrameErrorText, EveryErrorHasItsOwnText) {
  test::expect_each_error_has_its_own_text({FrameError::none, FrameError::too_large,
                                            FrameError::bad_end_octet, FrameError::unknown_type,
                                            FrameError::bad_heartbeat});
}

TEST(AppendHeartbeat, WritesTheHeartbeatFrame) {
  Bytes out;
  append_heartbeat(out);
  EXPECT_EQ(as_hex(out), as_hex(hex("08 00 00 00 00 00 00 ce")));
}

// ---- protocol header ----

const Bytes kAmqp091 = hex("41 4d 51 50 00 00 09 01");

TEST(ProtocolHeader, ExactHeaderIsOk) {
  EXPECT_EQ(check_protocol_header(kAmqp091), HeaderCheck::ok);
}

TEST(ProtocolHeader, HeaderFollowedByMoreBytesIsOk) {
  EXPECT_EQ(check_protocol_header(cat({kAmqp091, hex("01 00 00")})), HeaderCheck::ok);
}

TEST(ProtocolHeader, EveryPrefixNeedsMore) {
  for (std::size_t n = 0; n < kAmqp091.size(); ++n) {
    EXPECT_EQ(check_protocol_header(ByteView(kAmqp091).first(n)), HeaderCheck::need_more)
        << "prefix of " << n;
  }
}

struct BadHeaderCase {
  const char* name;
  Bytes bytes;
};

void PrintTo(const BadHeaderCase& c, std::ostream* os) {
  *os << c.name;
}

class BadProtocolHeader : public ::testing::TestWithParam<BadHeaderCase> {};

TEST_P(BadProtocolHeader, IsBad) {
  EXPECT_EQ(check_protocol_header(GetParam().bytes), HeaderCheck::bad);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadProtocolHeader,
    ::testing::Values(BadHeaderCase{"http_request", ascii("GET / HTTP/1.1\r\n")},
                      BadHeaderCase{"http_first_byte_only", ascii("G")},
                      BadHeaderCase{"tls_client_hello_first_byte", hex("16")},
                      BadHeaderCase{"amqp_0_8", hex("41 4d 51 50 01 01 08 00")},
                      BadHeaderCase{"amqp_0_9_0", hex("41 4d 51 50 00 00 09 00")},
                      BadHeaderCase{"amqp_0_9_old_style", hex("41 4d 51 50 01 01 00 09")},
                      BadHeaderCase{"amqp_1_0", hex("41 4d 51 50 00 01 00 00")},
                      // Bad as soon as the differing byte arrives, without waiting for all eight.
                      BadHeaderCase{"amqp_0_8_first_five_bytes", hex("41 4d 51 50 01")},
                      BadHeaderCase{"lowercase", ascii("amqp")},
                      BadHeaderCase{"a_method_frame", hex("01 00 00 00 00 00 04 00 0a 00 0a ce")}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace nackguard::amqp
