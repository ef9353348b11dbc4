// Method payloads against exact bytes: fields, bit packing, and decode errors as named
// cases. The round trip of every method struct is in method_roundtrip_test.cpp.
#include "proxy/amqp/method_codec.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "amqp/all_methods.hpp"
#include "amqp/codec_test_support.hpp"
#include "amqp/error_text_check.hpp"

namespace nackguard::amqp {
namespace {

using test::as_hex;
using test::ascii;
using test::cat;
using test::FieldSnapshot;
using test::hex;

template <typename M>
Bytes encoded(const M& method) {
  Bytes out;
  EXPECT_TRUE(encode_method(out, method));
  return out;
}

// ---- exact bytes ----

struct ExactCase {
  const char* name;
  std::function<Bytes()> encode;
  std::function<MethodError(ByteView, std::vector<FieldSnapshot::Field>&)> decode;
  std::vector<FieldSnapshot::Field> fields;
  Bytes bytes;
};

void PrintTo(const ExactCase& c, std::ostream* os) {
  *os << c.name;
}

template <typename M>
ExactCase exact(const char* name, M method, Bytes bytes) {
  return ExactCase{name, [method] { return encoded(method); },
                   [](ByteView wire, std::vector<FieldSnapshot::Field>& fields) {
                     M decoded;
                     MethodError error = decode_method(wire, decoded);
                     fields = FieldSnapshot::of(decoded);
                     return error;
                   },
                   FieldSnapshot::of(method), std::move(bytes)};
}

class MethodBothWays : public ::testing::TestWithParam<ExactCase> {};

TEST_P(MethodBothWays, EncodesToTheBytes) {
  EXPECT_EQ(as_hex(GetParam().encode()), as_hex(GetParam().bytes));
}

TEST_P(MethodBothWays, DecodesFromTheBytes) {
  std::vector<FieldSnapshot::Field> fields;
  ASSERT_EQ(GetParam().decode(GetParam().bytes, fields), MethodError::none);
  EXPECT_EQ(fields, GetParam().fields);
}

BasicConsume consume(bool no_local, bool no_ack, bool exclusive, bool no_wait) {
  BasicConsume m;
  m.queue = "q";
  m.consumer_tag = "ct";
  m.no_local = no_local, m.no_ack = no_ack, m.exclusive = exclusive, m.no_wait = no_wait;
  return m;
}

// basic.consume: reserved, queue "q", consumer tag "ct", one octet of 4 bits, empty table.
Bytes consume_bytes(const char* bits) {
  return cat({hex("00 3c 00 14  00 00  01 71  02 63 74"), hex(bits), hex("00 00 00 00")});
}

QueueDeclare declare(bool passive, bool durable, bool exclusive, bool auto_delete, bool no_wait) {
  QueueDeclare m;
  m.queue = "q";
  m.passive = passive, m.durable = durable, m.exclusive = exclusive;
  m.auto_delete = auto_delete, m.no_wait = no_wait;
  return m;
}

// queue.declare: reserved, queue "q", one octet of 5 bits, empty table.
Bytes declare_bytes(const char* bits) {
  return cat({hex("00 32 00 0a  00 00  01 71"), hex(bits), hex("00 00 00 00")});
}

BasicNack nack(bool multiple, bool requeue) {
  BasicNack m;
  m.delivery_tag = 42;
  m.multiple = multiple, m.requeue = requeue;
  return m;
}

// basic.nack: delivery tag 42, one octet of 2 bits.
Bytes nack_bytes(const char* bits) {
  return cat({hex("00 3c 00 78  00 00 00 00 00 00 00 2a"), hex(bits)});
}

INSTANTIATE_TEST_SUITE_P(
    BitPacking, MethodBothWays,
    ::testing::Values(
        exact("consume_no_bits", consume(false, false, false, false), consume_bytes("00")),
        exact("consume_no_local_is_bit_0", consume(true, false, false, false), consume_bytes("01")),
        exact("consume_no_ack_is_bit_1", consume(false, true, false, false), consume_bytes("02")),
        exact("consume_exclusive_is_bit_2", consume(false, false, true, false),
              consume_bytes("04")),
        exact("consume_no_wait_is_bit_3", consume(false, false, false, true), consume_bytes("08")),
        exact("consume_all_four", consume(true, true, true, true), consume_bytes("0f")),
        exact("consume_no_local_and_exclusive", consume(true, false, true, false),
              consume_bytes("05")),
        exact("declare_no_bits", declare(false, false, false, false, false), declare_bytes("00")),
        exact("declare_passive_is_bit_0", declare(true, false, false, false, false),
              declare_bytes("01")),
        exact("declare_durable_is_bit_1", declare(false, true, false, false, false),
              declare_bytes("02")),
        exact("declare_exclusive_is_bit_2", declare(false, false, true, false, false),
              declare_bytes("04")),
        exact("declare_auto_delete_is_bit_3", declare(false, false, false, true, false),
              declare_bytes("08")),
        exact("declare_no_wait_is_bit_4", declare(false, false, false, false, true),
              declare_bytes("10")),
        exact("declare_all_five", declare(true, true, true, true, true), declare_bytes("1f")),
        exact("declare_durable_and_auto_delete", declare(false, true, false, true, false),
              declare_bytes("0a")),
        exact("nack_neither", nack(false, false), nack_bytes("00")),
        exact("nack_multiple_is_bit_0", nack(true, false), nack_bytes("01")),
        exact("nack_requeue_is_bit_1", nack(false, true), nack_bytes("02")),
        exact("nack_both", nack(true, true), nack_bytes("03"))),
    [](const auto& info) { return std::string(info.param.name); });

ConnectionTune rabbitmq_tune() {
  ConnectionTune m;
  m.channel_max = 2047;
  m.frame_max = 131072;
  m.heartbeat = 60;
  return m;
}

BasicDeliver a_deliver() {
  BasicDeliver m;
  m.consumer_tag = "ctg";
  m.delivery_tag = 0x0102030405060708;
  m.redelivered = true;
  m.exchange = "";
  m.routing_key = "q";
  return m;
}

ChannelClose a_channel_close() {
  ChannelClose m;
  m.reply_code = 404;
  m.reply_text = "NOT_FOUND";
  m.class_id = 50;
  m.method_id = 10;
  return m;
}

QueueDeclare declare_with_arguments() {
  QueueDeclare m = declare(false, true, false, false, false);
  m.arguments.set("x-message-ttl", FieldValue::i32(60000));
  return m;
}

INSTANTIATE_TEST_SUITE_P(
    Fields, MethodBothWays,
    ::testing::Values(
        exact("connection_tune_as_rabbitmq_sends_it", rabbitmq_tune(),
              hex("00 0a 00 1e  07 ff  00 02 00 00  00 3c")),
        exact("basic_deliver", a_deliver(),
              hex("00 3c 00 3c  03 63 74 67  01 02 03 04 05 06 07 08  01  00  01 71")),
        exact("channel_close_shares_connection_close_fields", a_channel_close(),
              cat({hex("00 14 00 28  01 94  09"), ascii("NOT_FOUND"), hex("00 32 00 0a")})),
        exact("channel_open_ok_reserved_is_a_long_string", ChannelOpenOk{},
              hex("00 14 00 0b  00 00 00 00")),
        exact("queue_declare_with_arguments", declare_with_arguments(),
              cat({hex("00 32 00 0a  00 00  01 71  02  00 00 00 13  0d"), ascii("x-message-ttl"),
                   hex("49 00 00 ea 60")})),
        exact("basic_qos", BasicQos{0, 10, true}, hex("00 3c 00 0a  00 00 00 00  00 0a  01")),
        exact("confirm_select_ok_has_no_fields", ConfirmSelectOk{}, hex("00 55 00 0b"))),
    [](const auto& info) { return std::string(info.param.name); });

// Bits the method does not define are ignored, as RabbitMQ ignores them.
TEST(BitPacking, UnusedBitsAreIgnored) {
  BasicNack decoded;
  ASSERT_EQ(decode_method(nack_bytes("fc"), decoded), MethodError::none);
  EXPECT_FALSE(decoded.multiple);
  EXPECT_FALSE(decoded.requeue);
  ASSERT_EQ(decode_method(nack_bytes("ff"), decoded), MethodError::none);
  EXPECT_TRUE(decoded.multiple);
  EXPECT_TRUE(decoded.requeue);

  QueueDeclare declared;
  ASSERT_EQ(decode_method(declare_bytes("e0"), declared), MethodError::none);
  EXPECT_EQ(FieldSnapshot::of(declared),
            FieldSnapshot::of(declare(false, false, false, false, false)));
}

// ---- decode errors ----

struct MalformedMethod {
  const char* name;
  std::function<MethodError(ByteView)> decode;
  Bytes bytes;
  MethodError expected;
};

void PrintTo(const MalformedMethod& c, std::ostream* os) {
  *os << c.name;
}

template <typename M>
MalformedMethod malformed(const char* name, Bytes bytes, MethodError expected,
                          TableLimits limits = {}) {
  return {name,
          [limits](ByteView wire) {
            M decoded;
            return decode_method(wire, decoded, limits);
          },
          std::move(bytes), expected};
}

TableLimits max_depth(std::size_t depth) {
  TableLimits limits;
  limits.max_depth = depth;
  return limits;
}

TableLimits max_values(std::size_t values) {
  TableLimits limits;
  limits.max_values = values;
  return limits;
}

// queue.declare of "q" with no bits, followed by these argument-table bytes.
Bytes declare_with_table(const char* table) {
  return cat({hex("00 32 00 0a  00 00  01 71  00"), hex(table)});
}

class MethodDecodeErrors : public ::testing::TestWithParam<MalformedMethod> {};

TEST_P(MethodDecodeErrors, AreReportedByName) {
  EXPECT_EQ(GetParam().decode(GetParam().bytes), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MethodDecodeErrors,
    ::testing::Values(
        malformed<BasicAck>("empty", {}, MethodError::truncated),
        malformed<BasicAck>("class_only", hex("00 3c"), MethodError::truncated),
        malformed<BasicAck>("key_cut_short", hex("00 3c 00"), MethodError::truncated),
        malformed<BasicAck>("key_only", hex("00 3c 00 50"), MethodError::truncated),
        malformed<BasicAck>("delivery_tag_cut_short", hex("00 3c 00 50 00 00 00 00 00 00 00"),
                            MethodError::truncated),
        malformed<BasicAck>("bits_missing", hex("00 3c 00 50 00 00 00 00 00 00 00 01"),
                            MethodError::truncated),
        malformed<BasicAck>("trailing_byte", hex("00 3c 00 50 00 00 00 00 00 00 00 01 00 00"),
                            MethodError::trailing_bytes),
        malformed<BasicNack>("ack_decoded_as_nack", hex("00 3c 00 50 00 00 00 00 00 00 00 01 00"),
                             MethodError::wrong_method),
        malformed<BasicAck>("nack_decoded_as_ack", nack_bytes("02"), MethodError::wrong_method),
        malformed<ChannelClose>("connection_close_as_channel_close",
                                hex("00 0a 00 32 00 c8 00 00 00 00 00"), MethodError::wrong_method),
        malformed<BasicDeliver>("short_string_past_the_end", hex("00 3c 00 3c 05 61 62"),
                                MethodError::truncated),
        malformed<ChannelOpenOk>("long_string_ffffffff", hex("00 14 00 0b ff ff ff ff"),
                                 MethodError::truncated),
        malformed<QueueDeclare>("declare_trailing_byte", declare_with_table("00 00 00 00  00"),
                                MethodError::trailing_bytes),
        malformed<QueueDeclare>("declare_arguments_missing", declare_with_table(""),
                                MethodError::truncated),
        malformed<QueueDeclare>("declare_arguments_length_ffffffff",
                                declare_with_table("ff ff ff ff 01 61 56"), MethodError::truncated),
        malformed<QueueDeclare>("declare_arguments_value_cut_short",
                                declare_with_table("00 00 00 05 01 61 49 00 00"),
                                MethodError::truncated),
        malformed<QueueDeclare>("declare_arguments_unknown_letter",
                                declare_with_table("00 00 00 07 01 61 5a 00 00 00 00"),
                                MethodError::bad_table),
        malformed<QueueDeclare>("declare_arguments_unknown_letter_nested",
                                declare_with_table("00 00 00 09 01 61 46 00 00 00 02 00 55"),
                                MethodError::bad_table),
        malformed<QueueDeclare>("declare_arguments_too_deep",
                                declare_with_table("00 00 00 07 01 61 46 00 00 00 00"),
                                MethodError::bad_table, max_depth(1)),
        malformed<QueueDeclare>("declare_arguments_too_many_values",
                                declare_with_table("00 00 00 04 00 56 00 56"),
                                MethodError::bad_table, max_values(1)),
        malformed<ConnectionStart>("start_properties_unknown_letter",
                                   hex("00 0a 00 0a 00 09 00 00 00 03 01 61 5a"
                                       "00 00 00 05 50 4c 41 49 4e 00 00 00 05 65 6e 5f 55 53"),
                                   MethodError::bad_table)),
    [](const auto& info) { return std::string(info.param.name); });

TEST(PeekMethodKey, ReadsTheFirstFourBytes) {
  EXPECT_EQ(peek_method_key(hex("00 3c 00 50")), mid::basic_ack);
  EXPECT_EQ(peek_method_key(nack_bytes("00")), mid::basic_nack);
  EXPECT_EQ(peek_method_key(hex("ff ff ff ff")), method_key(0xFFFF, 0xFFFF));
  EXPECT_EQ(peek_method_key(hex("00 3c 00")), std::nullopt);
  EXPECT_EQ(peek_method_key(hex("00")), std::nullopt);
  EXPECT_EQ(peek_method_key({}), std::nullopt);
}

TEST(MethodKey, PacksClassAboveMethod) {
  EXPECT_EQ(method_key(60, 120), 0x003C0078u);
  EXPECT_EQ(mid::basic_nack, method_key(kClassBasic, 120));
}

TEST(CarriesContent, OnlyPublishReturnDeliverAndGetOk) {
  std::vector<std::uint32_t> with_content;
  test::AllMethods<test::TypeList>::for_each([&]<typename M>() {
    if (carries_content(M::kKey)) with_content.push_back(M::kKey);
  });
  EXPECT_EQ(with_content, (std::vector<std::uint32_t>{mid::basic_publish, mid::basic_return,
                                                      mid::basic_deliver, mid::basic_get_ok}));
}

TEST(EncodeMethod, RefusesWhatDoesNotFit) {
  BasicConsume long_queue = consume(false, false, false, false);
  long_queue.queue = std::string(256, 'q');
  Bytes out;
  EXPECT_FALSE(encode_method(out, long_queue));

  BasicConsume bad_arguments = consume(false, false, false, false);
  bad_arguments.arguments.set("k", FieldValue{'Z', std::monostate{}});
  Bytes out2;
  EXPECT_FALSE(encode_method(out2, bad_arguments));

  Bytes frame = hex("aa");
  EXPECT_FALSE(append_method_frame(frame, 1, long_queue));
  EXPECT_EQ(as_hex(frame), as_hex(hex("aa")));  // nothing half-written
}

TEST(EncodeMethod, ShortStringOf255BytesFits) {
  BasicConsume m = consume(false, false, false, false);
  m.queue = std::string(255, 'q');
  Bytes out;
  EXPECT_TRUE(encode_method(out, m));
}

TEST(AppendContentHeaderFrame, WrapsTheHeader) {
  ContentHeader header;
  header.body_size = 3;
  header.properties.delivery_mode = 2;
  Bytes out;
  ASSERT_TRUE(append_content_header_frame(out, 5, header));
  EXPECT_EQ(as_hex(out),
            as_hex(hex("02 00 05 00 00 00 0f  00 3c 00 00 00 00 00 00 00 00 00 03 10 00 02  ce")));

  header.properties.type = std::string(256, 't');
  Bytes refused = hex("aa");
  EXPECT_FALSE(append_content_header_frame(refused, 5, header));
  EXPECT_EQ(as_hex(refused), as_hex(hex("aa")));
}

TEST(MethodErrorText, EveryErrorHasItsOwnText) {
  test::expect_each_error_has_its_own_text({MethodError::none, MethodError::truncated,
                                            MethodError::wrong_method, MethodError::bad_table,
                                            MethodError::trailing_bytes});
}

}  // namespace
}  // namespace nackguard::amqp
