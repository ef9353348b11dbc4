// The replay publishes through rabbitmq-c, from properties the codec decoded and rewrote: what
// rabbitmq-c puts on the wire must be the bytes the codec would, type letters included.
#include "proxy/replay/rabbitmq_properties.hpp"

#include <amqp_framing.h>
#include <gtest/gtest.h>

#include <array>
#include <limits>

#include "amqp/codec_test_support.hpp"

namespace nackguard::replay {
namespace {

amqp::FieldTable every_letter() {
  amqp::FieldArray array;
  array.items = {amqp::FieldValue::i32(-7), amqp::FieldValue::string("in an array"),
                 amqp::FieldValue::none()};
  amqp::FieldTable nested;
  nested.set("deep", amqp::FieldValue::u16(65535));
  amqp::FieldTable table;
  table.set("t", amqp::FieldValue::boolean(true));
  table.set("f_bool", amqp::FieldValue::boolean(false));
  table.set("b", amqp::FieldValue::i8(-128));
  table.set("B", amqp::FieldValue::u8(255));
  table.set("s", amqp::FieldValue::i16(-32768));
  table.set("u", amqp::FieldValue::u16(65535));
  table.set("I", amqp::FieldValue::i32(std::numeric_limits<std::int32_t>::min()));
  table.set("i", amqp::FieldValue::u32(std::numeric_limits<std::uint32_t>::max()));
  table.set("l", amqp::FieldValue::i64(std::numeric_limits<std::int64_t>::min()));
  table.set("T", amqp::FieldValue::timestamp(1714564800));
  table.set("f", amqp::FieldValue::f32(1.5f));
  table.set("d", amqp::FieldValue::f64(-2.25));
  table.set("D", amqp::FieldValue::decimal({2, 12345}));
  table.set("S", amqp::FieldValue::string(std::string("utf-8 \xc3\xa9 and a \0 byte", 22)));
  table.set("x", amqp::FieldValue::bytes(std::string("\x00\xff\x10", 3)));
  table.set("A", amqp::FieldValue::array(array));
  table.set("F", amqp::FieldValue::table(nested));
  table.set("V", amqp::FieldValue::none());
  table.set("A_empty", amqp::FieldValue::array({}));
  return table;
}

amqp::ContentHeader full_header() {
  return amqp::test::every_property(every_letter(), 42);
}

// The codec's encoding of the header, without class, weight and body size.
amqp::Bytes codec_properties(const amqp::ContentHeader& header) {
  amqp::Bytes payload;
  amqp::ByteWriter writer(payload);
  EXPECT_TRUE(amqp::encode_content_header(writer, header));
  return amqp::Bytes(payload.begin() + 12, payload.end());
}

amqp::Bytes rabbitmq_c_properties(const amqp::ContentHeader& header) {
  RabbitProperties properties(header.properties);
  std::array<std::uint8_t, 4096> buffer{};
  const int length = amqp_encode_properties(AMQP_BASIC_CLASS,
                                            const_cast<amqp_basic_properties_t*>(properties.get()),
                                            {buffer.size(), buffer.data()});
  EXPECT_GT(length, 0);
  return amqp::Bytes(buffer.begin(), buffer.begin() + std::max(length, 0));
}

TEST(RabbitProperties, EncodeAsTheCodecDoesWithEveryTypeLetter) {
  const amqp::ContentHeader header = full_header();
  EXPECT_EQ(rabbitmq_c_properties(header), codec_properties(header));
}

TEST(RabbitProperties, AbsentPropertiesStayAbsent) {
  amqp::ContentHeader header;
  EXPECT_EQ(rabbitmq_c_properties(header), codec_properties(header));
  header.properties.message_id = "only";
  header.properties.headers = amqp::FieldTable{};
  EXPECT_EQ(rabbitmq_c_properties(header), codec_properties(header));
}

TEST(DecodeRawHeader, ReadsWhatRabbitmqCHandsOver) {
  const amqp::ContentHeader header = full_header();
  const amqp::Bytes raw = codec_properties(header);
  amqp::ContentHeader decoded;
  ASSERT_EQ(decode_raw_header(60, 42, {raw.size(), const_cast<std::uint8_t*>(raw.data())}, decoded),
            amqp::HeaderError::none);
  EXPECT_EQ(decoded, header);
}

TEST(DecodeRawHeader, RefusesBytesTheCodecRefuses) {
  const amqp::Bytes raw{0x20, 0x00, 0x00, 0x00, 0x00, 0x09, 'k'};  // headers, table cut short
  amqp::ContentHeader decoded;
  EXPECT_NE(decode_raw_header(60, 0, {raw.size(), const_cast<std::uint8_t*>(raw.data())}, decoded),
            amqp::HeaderError::none);
}

}  // namespace
}  // namespace nackguard::replay
