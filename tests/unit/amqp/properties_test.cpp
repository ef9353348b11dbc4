// Content headers and the 14 basic properties, checked both ways against exact bytes, and
// malformed headers as named cases.
#include "proxy/amqp/properties.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "amqp/codec_test_support.hpp"
#include "amqp/error_text_check.hpp"

namespace nackguard::amqp {
namespace {

using namespace test;

// class 60, weight 0, body size 10; the flags follow.
const Bytes kHeaderStart = hex("00 3c 00 00  00 00 00 00 00 00 00 0a");

FieldTable one_header() {
  FieldTable headers;
  headers.set("h", FieldValue::i32(7));
  return headers;
}

// One property: its flag bit, how to set it, and its bytes after the flags.
struct PropertyCase {
  const char* name;
  std::uint16_t flag;
  std::function<void(BasicProperties&)> set;
  Bytes bytes;
};

void PrintTo(const PropertyCase& c, std::ostream* os) {
  *os << c.name;
}

// In wire order, so that concatenating every case's bytes gives the all-set header.
const PropertyCase kProperties[] = {
    {"content_type", 0x8000, [](auto& p) { p.content_type = "text/plain"; },
     cat({hex("0a"), ascii("text/plain")})},
    {"content_encoding", 0x4000, [](auto& p) { p.content_encoding = "gzip"; },
     cat({hex("04"), ascii("gzip")})},
    {"headers", 0x2000, [](auto& p) { p.headers = one_header(); },
     hex("00 00 00 07  01 68 49 00 00 00 07")},
    {"delivery_mode", 0x1000, [](auto& p) { p.delivery_mode = 2; }, hex("02")},
    {"priority", 0x0800, [](auto& p) { p.priority = 9; }, hex("09")},
    {"correlation_id", 0x0400, [](auto& p) { p.correlation_id = "c1"; },
     cat({hex("02"), ascii("c1")})},
    {"reply_to", 0x0200, [](auto& p) { p.reply_to = "r"; }, cat({hex("01"), ascii("r")})},
    {"expiration", 0x0100, [](auto& p) { p.expiration = "60000"; },
     cat({hex("05"), ascii("60000")})},
    {"message_id", 0x0080, [](auto& p) { p.message_id = "m-1"; }, cat({hex("03"), ascii("m-1")})},
    {"timestamp", 0x0040, [](auto& p) { p.timestamp = 1700000000; },
     hex("00 00 00 00 65 53 f1 00")},
    {"type", 0x0020, [](auto& p) { p.type = "t"; }, cat({hex("01"), ascii("t")})},
    {"user_id", 0x0010, [](auto& p) { p.user_id = "guest"; }, cat({hex("05"), ascii("guest")})},
    {"app_id", 0x0008, [](auto& p) { p.app_id = "app"; }, cat({hex("03"), ascii("app")})},
    // An empty string is still a present property: the flag is set, the length is 0.
    {"cluster_id_empty", 0x0004, [](auto& p) { p.cluster_id = ""; }, hex("00")},
};

Bytes flags_bytes(std::uint16_t flags) {
  return {static_cast<std::uint8_t>(flags >> 8), static_cast<std::uint8_t>(flags)};
}

ContentHeader header_with(const BasicProperties& properties) {
  ContentHeader header;
  header.class_id = 60;
  header.body_size = 10;
  header.properties = properties;
  return header;
}

ContentHeader all_set() {
  BasicProperties properties;
  for (const auto& c : kProperties) c.set(properties);
  return header_with(properties);
}

Bytes all_set_bytes() {
  Bytes out = cat({kHeaderStart, hex("ff fc")});
  for (const auto& c : kProperties) out.insert(out.end(), c.bytes.begin(), c.bytes.end());
  return out;
}

Bytes encode(const ContentHeader& header) {
  Bytes out;
  ByteWriter writer(out);
  EXPECT_TRUE(encode_content_header(writer, header));
  return out;
}

class SingleProperty : public ::testing::TestWithParam<PropertyCase> {};

TEST_P(SingleProperty, EncodesItsFlagAndBytes) {
  BasicProperties properties;
  GetParam().set(properties);
  EXPECT_EQ(as_hex(encode(header_with(properties))),
            as_hex(cat({kHeaderStart, flags_bytes(GetParam().flag), GetParam().bytes})));
}

TEST_P(SingleProperty, DecodesFromItsFlagAndBytes) {
  BasicProperties properties;
  GetParam().set(properties);
  ContentHeader decoded;
  ASSERT_EQ(decode_content_header(
                cat({kHeaderStart, flags_bytes(GetParam().flag), GetParam().bytes}), decoded),
            HeaderError::none);
  EXPECT_EQ(decoded, header_with(properties));
}

// The flag says a property is there and its bytes are missing.
TEST_P(SingleProperty, FlagWithoutTheBytesIsTruncated) {
  ContentHeader decoded;
  EXPECT_EQ(decode_content_header(cat({kHeaderStart, flags_bytes(GetParam().flag)}), decoded),
            HeaderError::truncated);
}

// The bytes are there and the flag is not: they are trailing bytes.
TEST_P(SingleProperty, BytesWithoutTheFlagAreTrailing) {
  ContentHeader decoded;
  EXPECT_EQ(decode_content_header(cat({kHeaderStart, hex("00 00"), GetParam().bytes}), decoded),
            HeaderError::trailing_bytes);
}

INSTANTIATE_TEST_SUITE_P(EachOfTheFourteen, SingleProperty, ::testing::ValuesIn(kProperties),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(PropertyCases, FlagsAreTheFourteenHighBitsInOrder) {
  std::uint16_t expected = 0x8000;
  for (const auto& c : kProperties) {
    EXPECT_EQ(c.flag, expected) << c.name;
    expected >>= 1;
  }
  EXPECT_EQ(expected, 0x0002);  // bits 1 and 0 (continuation) are not properties
}

TEST(AllPropertiesSet, EncodesToTheBytes) {
  EXPECT_EQ(as_hex(encode(all_set())), as_hex(all_set_bytes()));
}

TEST(AllPropertiesSet, DecodesToTheValue) {
  ContentHeader decoded;
  ASSERT_EQ(decode_content_header(all_set_bytes(), decoded), HeaderError::none);
  EXPECT_EQ(decoded, all_set());
}

TEST(AllPropertiesSet, RoundTripGivesIdenticalBytes) {
  ContentHeader decoded;
  ASSERT_EQ(decode_content_header(all_set_bytes(), decoded), HeaderError::none);
  EXPECT_EQ(as_hex(encode(decoded)), as_hex(all_set_bytes()));
}

TEST(AllPropertiesSet, EveryStrictPrefixIsTruncated) {
  Bytes wire = all_set_bytes();
  for (std::size_t n = 0; n < wire.size(); ++n) {
    ContentHeader decoded;
    EXPECT_EQ(decode_content_header(ByteView(wire).first(n), decoded), HeaderError::truncated)
        << "prefix of " << n;
  }
}

TEST(NoPropertySet, BothWays) {
  Bytes wire = cat({kHeaderStart, hex("00 00")});
  EXPECT_EQ(as_hex(encode(header_with({}))), as_hex(wire));
  ContentHeader decoded;
  ASSERT_EQ(decode_content_header(wire, decoded), HeaderError::none);
  EXPECT_EQ(decoded, header_with({}));
  for (std::size_t n = 0; n < wire.size(); ++n) {
    EXPECT_EQ(decode_content_header(ByteView(wire).first(n), decoded), HeaderError::truncated)
        << "prefix of " << n;
  }
}

TEST(ContentHeaderFields, WeightAndBodySizeAreBigEndian) {
  ContentHeader header;
  header.weight = 0x0102;
  header.body_size = 0x0102030405060708;
  Bytes wire = hex("00 3c 01 02  01 02 03 04 05 06 07 08  00 00");
  EXPECT_EQ(as_hex(encode(header)), as_hex(wire));
  ContentHeader decoded;
  ASSERT_EQ(decode_content_header(wire, decoded), HeaderError::none);
  EXPECT_EQ(decoded, header);
}

// Decoding into a header that held another message's properties leaves none of them behind.
TEST(ContentHeaderFields, DecodeReplacesWhatTheOutputHeld) {
  ContentHeader decoded = all_set();
  ASSERT_EQ(decode_content_header(cat({kHeaderStart, hex("00 00")}), decoded), HeaderError::none);
  EXPECT_EQ(decoded, header_with({}));
}

TEST(ContentHeaderFields, OtherClassWithoutFlagsDecodes) {
  Bytes wire = hex("00 32 00 00  00 00 00 00 00 00 00 00  00 00");
  ContentHeader decoded;
  ASSERT_EQ(decode_content_header(wire, decoded), HeaderError::none);
  EXPECT_EQ(decoded.class_id, 50);
  EXPECT_EQ(as_hex(encode(decoded)), as_hex(wire));
}

struct MalformedHeader {
  const char* name;
  Bytes wire;
  HeaderError expected;
};

void PrintTo(const MalformedHeader& c, std::ostream* os) {
  *os << c.name;
}

class MalformedContentHeader : public ::testing::TestWithParam<MalformedHeader> {};

TEST_P(MalformedContentHeader, IsRefusedWithItsError) {
  ContentHeader decoded;
  EXPECT_EQ(decode_content_header(GetParam().wire, decoded), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MalformedContentHeader,
    ::testing::Values(
        MalformedHeader{"empty", {}, HeaderError::truncated},
        MalformedHeader{"no_flags", kHeaderStart, HeaderError::truncated},
        MalformedHeader{"half_the_flags", cat({kHeaderStart, hex("00")}), HeaderError::truncated},
        MalformedHeader{"continuation_flag", cat({kHeaderStart, hex("00 01")}),
                        HeaderError::bad_flags},
        MalformedHeader{"continuation_with_properties",
                        cat({kHeaderStart, hex("80 01 01 61 00 00")}), HeaderError::bad_flags},
        MalformedHeader{"unused_flag_bit_1", cat({kHeaderStart, hex("00 02")}),
                        HeaderError::bad_flags},
        MalformedHeader{"all_sixteen_flags", cat({kHeaderStart, hex("ff ff")}),
                        HeaderError::bad_flags},
        MalformedHeader{"other_class_with_flags",
                        cat({hex("00 32 00 00 00 00 00 00 00 00 00 00"), hex("10 00 02")}),
                        HeaderError::bad_flags},
        MalformedHeader{"trailing_byte_after_no_properties", cat({kHeaderStart, hex("00 00 00")}),
                        HeaderError::trailing_bytes},
        MalformedHeader{"trailing_bytes_after_all_properties", cat({all_set_bytes(), hex("ce")}),
                        HeaderError::trailing_bytes},
        MalformedHeader{"short_string_past_the_end", cat({kHeaderStart, hex("80 00 05 61")}),
                        HeaderError::truncated},
        MalformedHeader{"timestamp_cut_short", cat({kHeaderStart, hex("00 40 00 00 00")}),
                        HeaderError::truncated},
        MalformedHeader{"headers_unknown_letter",
                        cat({kHeaderStart, hex("20 00  00 00 00 03 01 61 5a")}),
                        HeaderError::bad_table},
        MalformedHeader{"headers_unknown_letter_nested",
                        cat({kHeaderStart, hex("20 00  00 00 00 09 01 61 46 00 00 00 02 00 55")}),
                        HeaderError::bad_table},
        MalformedHeader{"headers_length_ffffffff",
                        cat({kHeaderStart, hex("20 00  ff ff ff ff 01 61 56")}),
                        HeaderError::truncated},
        MalformedHeader{"headers_value_past_its_table",
                        cat({kHeaderStart, hex("20 00  00 00 00 04 01 61 49 00  00 00 00")}),
                        HeaderError::truncated}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ContentHeaderLimits, HeadersTablePassesTheLimits) {
  TableLimits limits;
  limits.max_values = 1;
  Bytes wire = cat({kHeaderStart, hex("20 00  00 00 00 04 00 56 00 56")});
  ContentHeader decoded;
  EXPECT_EQ(decode_content_header(wire, decoded), HeaderError::none);
  EXPECT_EQ(decode_content_header(wire, decoded, limits), HeaderError::bad_table);

  limits = {};
  limits.max_depth = 1;
  Bytes nested = cat({kHeaderStart, hex("20 00  00 00 00 06 00 46 00 00 00 00")});
  ContentHeader too_deep;
  EXPECT_EQ(decode_content_header(nested, too_deep, limits), HeaderError::bad_table);
}

TEST(EncodeContentHeader, RefusesWhatCannotBeEncoded) {
  BasicProperties long_string;
  long_string.message_id = std::string(256, 'm');
  Bytes out;
  ByteWriter writer(out);
  EXPECT_FALSE(encode_content_header(writer, header_with(long_string)));

  BasicProperties bad_table;
  bad_table.headers = FieldTable{};
  bad_table.headers->set("k", FieldValue{'Z', std::monostate{}});
  Bytes out2;
  ByteWriter writer2(out2);
  EXPECT_FALSE(encode_content_header(writer2, header_with(bad_table)));
}

TEST(PeekBodySize, ReadsOnlyTheFirstTwelveBytes) {
  EXPECT_EQ(peek_body_size(all_set_bytes()), 10u);
  EXPECT_EQ(peek_body_size(kHeaderStart), 10u);
  EXPECT_EQ(peek_body_size(ByteView(kHeaderStart).first(11)), std::nullopt);
  EXPECT_EQ(peek_body_size({}), std::nullopt);
  EXPECT_EQ(peek_body_size(hex("00 3c 00 00 ff ff ff ff ff ff ff ff")), ~std::uint64_t{0});
  // It does not judge the properties: a header with bad flags still has a body size.
  EXPECT_EQ(peek_body_size(cat({kHeaderStart, hex("00 01")})), 10u);
}

TEST(HeaderErrorText, EveryErrorHasItsOwnText) {
  test::expect_each_error_has_its_own_text({HeaderError::none, HeaderError::truncated,
                                            HeaderError::bad_flags, HeaderError::bad_table,
                                            HeaderError::trailing_bytes});
}

}  // namespace
}  // namespace nackguard::amqp
