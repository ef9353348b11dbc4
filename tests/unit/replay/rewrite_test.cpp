// The copy's headers: the return count reset, x-nackguard-replays counted up, and everything
// else (properties, other headers with their type letters, order) the same bytes.
#include "proxy/replay/rewrite.hpp"

#include <gtest/gtest.h>

#include <limits>

#include "amqp/codec_test_support.hpp"

namespace nackguard::replay {
namespace {

using amqp::Bytes;
using amqp::ContentHeader;
using amqp::FieldTable;
using amqp::FieldValue;
using amqp::test::as_hex;
using amqp::test::hex;

Bytes encode(const ContentHeader& header) {
  Bytes out;
  amqp::ByteWriter writer(out);
  EXPECT_TRUE(amqp::encode_content_header(writer, header));
  return out;
}

ContentHeader decode(const Bytes& bytes) {
  ContentHeader header;
  EXPECT_EQ(amqp::decode_content_header(bytes, header), amqp::HeaderError::none);
  return header;
}

// What nackguard's dead-letter copies carry, among headers of every type letter.
FieldTable dead_letter_headers() {
  FieldTable nested;
  nested.set("inner", FieldValue::u16(9));
  amqp::FieldArray array;
  array.items = {FieldValue::string("a"), FieldValue::i8(-1), FieldValue::table(nested)};
  FieldTable h;
  h.set("x-nackguard-reason", FieldValue::string("max_redeliveries"));
  h.set("x-nackguard-returns", FieldValue::i64(6));
  h.set("x-nackguard-first-return", FieldValue::timestamp(1700000000));
  h.set("x-nackguard-last-return", FieldValue::timestamp(1700000300));
  h.set("x-nackguard-queue", FieldValue::string("orders"));
  h.set("x-original-exchange", FieldValue::string(""));
  h.set("x-original-routingKey", FieldValue::string("orders"));
  h.set("x-delivery-count", FieldValue::i64(2));
  h.set("x-acquired-count", FieldValue::i64(3));
  h.set("bool", FieldValue::boolean(true));
  h.set("u8", FieldValue::u8(200));
  h.set("i16", FieldValue::i16(-300));
  h.set("i32", FieldValue::i32(-70000));
  h.set("u32", FieldValue::u32(4000000000u));
  h.set("float", FieldValue::f32(1.5f));
  h.set("double", FieldValue::f64(-2.25));
  h.set("decimal", FieldValue::decimal({2, 12345}));
  h.set("bytes", FieldValue::bytes(std::string("\0\xff", 2)));
  h.set("void", FieldValue::none());
  h.set("array", FieldValue::array(array));
  h.set("table", FieldValue::table(nested));
  return h;
}

ContentHeader every_property() {
  return amqp::test::every_property(dead_letter_headers(), 11);
}

TEST(ReplayCopyHeader, ExactBytesOfASmallCase) {
  // headers {a: I 7, x-nackguard-returns: l 6, b: S "x"}, nothing else.
  const Bytes original =
      hex("00 3c 00 00  00 00 00 00 00 00 00 03  20 00"
          "00 00 00 2c"
          "01 61 49 00 00 00 07"
          "13 78 2d 6e 61 63 6b 67 75 61 72 64 2d 72 65 74 75 72 6e 73 6c 00 00 00 00 00 00 00 06"
          "01 62 53 00 00 00 01 78");
  // {a: I 7, b: S "x", x-nackguard-replays: l 1}
  const Bytes expected =
      hex("00 3c 00 00  00 00 00 00 00 00 00 03  20 00"
          "00 00 00 2c"
          "01 61 49 00 00 00 07"
          "01 62 53 00 00 00 01 78"
          "13 78 2d 6e 61 63 6b 67 75 61 72 64 2d 72 65 70 6c 61 79 73 6c 00 00 00 00 00 00 00 01");
  EXPECT_EQ(as_hex(encode(replay_copy_header(decode(original)))), as_hex(expected));
}

TEST(ReplayCopyHeader, KeepsEveryOtherPropertyAndHeaderByteForByte) {
  const Bytes original_bytes = encode(every_property());
  const ContentHeader original = decode(original_bytes);
  // Decoding and encoding again changes nothing: the rewrite below is the only difference.
  ASSERT_EQ(as_hex(encode(original)), as_hex(original_bytes));

  ContentHeader copy = decode(encode(replay_copy_header(original)));

  ContentHeader expected = original;
  FieldTable& headers = *expected.properties.headers;
  std::erase_if(headers.entries, [](const auto& e) {
    return e.first == "x-nackguard-returns" || e.first == "x-delivery-count" ||
           e.first == "x-acquired-count";
  });
  headers.set("x-nackguard-replays", FieldValue::i64(1));
  EXPECT_EQ(as_hex(encode(copy)), as_hex(encode(expected)));
  EXPECT_EQ(copy.properties.headers->find("x-nackguard-returns"), nullptr);
  EXPECT_EQ(copy.properties.headers->find("x-delivery-count"), nullptr);
  EXPECT_EQ(copy.properties.headers->find("x-acquired-count"), nullptr);
  EXPECT_EQ(*copy.properties.headers->find("x-nackguard-replays"), FieldValue::i64(1));
}

TEST(ReplayCopyHeader, CountsUpInPlaceAsALong) {
  ContentHeader header;
  header.properties.headers.emplace();
  header.properties.headers->set("first", FieldValue::i32(1));
  header.properties.headers->set("x-nackguard-replays", FieldValue::i32(2));
  header.properties.headers->set("last", FieldValue::i32(3));
  ContentHeader copy = replay_copy_header(header);
  const auto& entries = copy.properties.headers->entries;
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[1].first, "x-nackguard-replays");
  EXPECT_EQ(entries[1].second, FieldValue::i64(3));
  EXPECT_EQ(entries[2].first, "last");
}

TEST(ReplayCopyHeader, AddsAHeadersTableWhenThereWasNone) {
  ContentHeader header;
  header.properties.message_id = "m";
  ContentHeader copy = replay_copy_header(header);
  ASSERT_TRUE(copy.properties.headers);
  ASSERT_EQ(copy.properties.headers->entries.size(), 1u);
  EXPECT_EQ(*copy.properties.headers->find("x-nackguard-replays"), FieldValue::i64(1));
  EXPECT_EQ(copy.properties.message_id, "m");
}

struct ReplaysCase {
  const char* name;
  std::optional<FieldValue> value;
  std::int64_t replays;
};

void PrintTo(const ReplaysCase& c, std::ostream* os) {
  *os << c.name;
}

class ReplaysOfTest : public testing::TestWithParam<ReplaysCase> {};

TEST_P(ReplaysOfTest, ReadsAndCountsUp) {
  const ReplaysCase& c = GetParam();
  ContentHeader header;
  header.properties.headers.emplace();
  if (c.value) header.properties.headers->set("x-nackguard-replays", *c.value);
  EXPECT_EQ(replays_of(header.properties), c.replays);
  std::int64_t next =
      c.replays == std::numeric_limits<std::int64_t>::max() ? c.replays : c.replays + 1;
  EXPECT_EQ(*replay_copy_header(header).properties.headers->find("x-nackguard-replays"),
            FieldValue::i64(next));
}

INSTANTIATE_TEST_SUITE_P(
    Values, ReplaysOfTest,
    testing::Values(ReplaysCase{"absent", std::nullopt, 0},
                    ReplaysCase{"long", FieldValue::i64(2), 2},
                    ReplaysCase{"int", FieldValue::i32(4), 4},
                    ReplaysCase{"unsigned_byte", FieldValue::u8(1), 1},
                    ReplaysCase{"short", FieldValue::i16(7), 7},
                    ReplaysCase{"negative", FieldValue::i64(-5), 0},
                    ReplaysCase{"string", FieldValue::string("2"), 0},
                    ReplaysCase{"boolean", FieldValue::boolean(true), 0},
                    ReplaysCase{"void", FieldValue::none(), 0},
                    ReplaysCase{"largest",
                                FieldValue::i64(std::numeric_limits<std::int64_t>::max()),
                                std::numeric_limits<std::int64_t>::max()}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ReplaysOf, NoHeadersTableIsZero) {
  EXPECT_EQ(replays_of(amqp::BasicProperties{}), 0);
}

TEST(ReasonOf, ReadsTheReasonHeader) {
  amqp::BasicProperties p;
  EXPECT_EQ(reason_of(p), "(no reason)");
  p.headers.emplace();
  p.headers->set("x-nackguard-reason", FieldValue::string("crash_loop"));
  EXPECT_EQ(reason_of(p), "crash_loop");
  p.headers->set("x-nackguard-reason", FieldValue::bytes("max_redeliveries"));
  EXPECT_EQ(reason_of(p), "max_redeliveries");
  p.headers->set("x-nackguard-reason", FieldValue::i32(3));
  EXPECT_EQ(reason_of(p), "(no reason)");
  p.headers->set("x-nackguard-reason", FieldValue::string(""));
  EXPECT_EQ(reason_of(p), "(no reason)");
  p.headers->set("x-nackguard-reason", FieldValue::string("two\nlines"));
  EXPECT_EQ(reason_of(p), "two?lines");
}

TEST(LabelOf, IsTheMessageIdOrSaysThereIsNone) {
  amqp::BasicProperties p;
  EXPECT_EQ(label_of(p), "(no message_id)");
  p.message_id = "";
  EXPECT_EQ(label_of(p), "(no message_id)");
  p.message_id = "order-42";
  EXPECT_EQ(label_of(p), "order-42");
  p.message_id = "a\rb";
  EXPECT_EQ(label_of(p), "a?b");
}

TEST(Printable, ReplacesControlCharactersAndCuts) {
  EXPECT_EQ(printable("ok"), "ok");
  EXPECT_EQ(printable(std::string("a\0b\x7f", 4)), "a?b?");
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 stays
}

}  // namespace
}  // namespace nackguard::replay
