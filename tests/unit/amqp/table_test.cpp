// Field tables, checked both ways against exact bytes: every type letter, nested values, the
// every-letter round trip, and byte-by-byte truncation with trailing bytes left alone.
#include "proxy/amqp/table.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "amqp/all_methods.hpp"
#include "amqp/codec_test_support.hpp"

namespace nackguard::amqp {
namespace {

using namespace test;

// A value and its exact wire form: the type letter followed by the value's bytes.
struct ValueCase {
  const char* name;
  FieldValue value;
  Bytes bytes;
};

void PrintTo(const ValueCase& c, std::ostream* os) {
  *os << c.name;
}

FieldTable one_entry(const FieldValue& value) {
  FieldTable table;
  table.set("k", value);
  return table;
}

FieldArray nested_array() {
  FieldArray inner;
  inner.items = {FieldValue::boolean(true)};
  FieldArray outer;
  outer.items = {FieldValue::array(inner)};
  return outer;
}

FieldTable nested_table() {
  FieldTable inner;
  inner.set("m", FieldValue::none());
  FieldTable outer;
  outer.set("n", FieldValue::table(inner));
  return outer;
}

FieldArray mixed_array() {
  FieldArray array;
  array.items = {FieldValue::i32(1), FieldValue::string("a")};
  return array;
}

FieldTable one_u8_table() {
  FieldTable table;
  table.set("a", FieldValue::u8(1));
  return table;
}

const ValueCase kValueCases[] = {
    {"t_true", FieldValue::boolean(true), hex("74 01")},
    {"t_false", FieldValue::boolean(false), hex("74 00")},
    {"b_minus_1", FieldValue::i8(-1), hex("62 ff")},
    {"b_min", FieldValue::i8(-128), hex("62 80")},
    {"b_max", FieldValue::i8(127), hex("62 7f")},
    {"B_max", FieldValue::u8(255), hex("42 ff")},
    {"B_zero", FieldValue::u8(0), hex("42 00")},
    {"s_minus_2", FieldValue::i16(-2), hex("73 ff fe")},
    {"s_min", FieldValue::i16(-32768), hex("73 80 00")},
    {"s_big_endian", FieldValue::i16(0x1234), hex("73 12 34")},
    {"u_max", FieldValue::u16(65535), hex("75 ff ff")},
    {"u_big_endian", FieldValue::u16(0x1234), hex("75 12 34")},
    {"I_minus_1", FieldValue::i32(-1), hex("49 ff ff ff ff")},
    {"I_min", FieldValue::i32(std::numeric_limits<std::int32_t>::min()), hex("49 80 00 00 00")},
    {"I_ttl", FieldValue::i32(60000), hex("49 00 00 ea 60")},
    {"i_max", FieldValue::u32(4294967295u), hex("69 ff ff ff ff")},
    {"i_big_endian", FieldValue::u32(0x01020304), hex("69 01 02 03 04")},
    {"l_minus_1", FieldValue::i64(-1), hex("6c ff ff ff ff ff ff ff ff")},
    {"l_min", FieldValue::i64(std::numeric_limits<std::int64_t>::min()),
     hex("6c 80 00 00 00 00 00 00 00")},
    {"l_big_endian", FieldValue::i64(0x0102030405060708), hex("6c 01 02 03 04 05 06 07 08")},
    {"T_timestamp", FieldValue::timestamp(1700000000), hex("54 00 00 00 00 65 53 f1 00")},
    {"T_max", FieldValue::timestamp(~std::uint64_t{0}), hex("54 ff ff ff ff ff ff ff ff")},
    {"f_one_and_a_half", FieldValue::f32(1.5f), hex("66 3f c0 00 00")},
    {"f_negative", FieldValue::f32(-2.0f), hex("66 c0 00 00 00")},
    {"d_negative", FieldValue::f64(-2.5), hex("64 c0 04 00 00 00 00 00 00")},
    {"d_one", FieldValue::f64(1.0), hex("64 3f f0 00 00 00 00 00 00")},
    {"D_decimal", FieldValue::decimal({2, 12345}), hex("44 02 00 00 30 39")},
    {"D_max", FieldValue::decimal({255, 0xFFFFFFFF}), hex("44 ff ff ff ff ff")},
    {"S_text", FieldValue::string("hello"), hex("53 00 00 00 05 68 65 6c 6c 6f")},
    {"S_empty", FieldValue::string(""), hex("53 00 00 00 00")},
    {"S_utf8", FieldValue::string("\xc3\xa9"), hex("53 00 00 00 02 c3 a9")},
    {"x_binary", FieldValue::bytes(std::string("\0\xff", 2)), hex("78 00 00 00 02 00 ff")},
    {"x_empty", FieldValue::bytes(""), hex("78 00 00 00 00")},
    {"V_void", FieldValue::none(), hex("56")},
    {"A_empty", FieldValue::array({}), hex("41 00 00 00 00")},
    {"A_mixed", FieldValue::array(mixed_array()),
     hex("41 00 00 00 0b  49 00 00 00 01  53 00 00 00 01 61")},
    {"A_nested", FieldValue::array(nested_array()), hex("41 00 00 00 07  41 00 00 00 02 74 01")},
    {"F_empty", FieldValue::table({}), hex("46 00 00 00 00")},
    {"F_one_entry", FieldValue::table(one_u8_table()), hex("46 00 00 00 04  01 61 42 01")},
    {"F_nested", FieldValue::table(nested_table()),
     hex("46 00 00 00 0a  01 6e 46 00 00 00 03 01 6d 56")},
};

class FieldValueBothWays : public ::testing::TestWithParam<ValueCase> {};

// Inside a table: u32 length, then the name "k" as a short string, then the value.
TEST_P(FieldValueBothWays, DecodesFromBytesInATable) {
  const ValueCase& c = GetParam();
  Bytes wire = sized(cat({hex("01"), ascii("k"), c.bytes}));
  ByteReader reader(wire);
  FieldTable decoded;
  ASSERT_EQ(decode_table(reader, decoded), TableError::none);
  EXPECT_TRUE(reader.at_end());
  ASSERT_EQ(decoded.entries.size(), 1u);
  EXPECT_EQ(decoded.entries[0].first, "k");
  EXPECT_EQ(decoded.entries[0].second.type, c.value.type);
  EXPECT_EQ(decoded.entries[0].second, c.value);
}

TEST_P(FieldValueBothWays, EncodesToBytesInATable) {
  const ValueCase& c = GetParam();
  Bytes encoded;
  ByteWriter writer(encoded);
  ASSERT_TRUE(encode_table(writer, one_entry(c.value)));
  EXPECT_EQ(as_hex(encoded), as_hex(sized(cat({hex("01"), ascii("k"), c.bytes}))));
}

// Inside an array: u32 length, then the value alone.
TEST_P(FieldValueBothWays, DecodesFromBytesInAnArray) {
  const ValueCase& c = GetParam();
  Bytes wire = sized(c.bytes);
  ByteReader reader(wire);
  FieldArray decoded;
  ASSERT_EQ(decode_array(reader, decoded), TableError::none);
  EXPECT_TRUE(reader.at_end());
  ASSERT_EQ(decoded.items.size(), 1u);
  EXPECT_EQ(decoded.items[0], c.value);
}

TEST_P(FieldValueBothWays, EncodesToBytesInAnArray) {
  const ValueCase& c = GetParam();
  FieldArray array;
  array.items = {c.value};
  Bytes encoded;
  ByteWriter writer(encoded);
  ASSERT_TRUE(encode_table(writer, one_entry(FieldValue::array(array))));
  // Table length (4), name (2) and the array's letter (1) come before the array's length.
  EXPECT_EQ(as_hex(ByteView(encoded).subspan(7)), as_hex(sized(c.bytes)));
}

TEST_P(FieldValueBothWays, EveryStrictPrefixIsTruncated) {
  const ValueCase& c = GetParam();
  Bytes wire = sized(cat({hex("01"), ascii("k"), c.bytes}));
  for (std::size_t n = 0; n < wire.size(); ++n) {
    // The table's own length still claims the full size, so each prefix is short of it.
    ByteReader reader(ByteView(wire).first(n));
    FieldTable decoded;
    EXPECT_EQ(decode_table(reader, decoded), TableError::truncated) << "prefix of " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryLetter, FieldValueBothWays, ::testing::ValuesIn(kValueCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FieldValueCases, CoverEveryTypeLetter) {
  std::string letters;
  for (const auto& c : kValueCases) {
    if (letters.find(c.value.type) == std::string::npos) letters += c.value.type;
  }
  for (char letter : std::string("tbBsuIilfdDSATFVx")) {
    EXPECT_NE(letters.find(letter), std::string::npos) << "no case for '" << letter << "'";
  }
}

// NaN has no value equality; its bits must survive instead.
TEST(FieldValueFloats, NanAndNegativeZeroKeepTheirBits) {
  Bytes wire = sized(cat(
      {hex("00 66 7f c0 00 01"), hex("00 64 ff f8 00 00 00 00 00 02"), hex("00 66 80 00 00 00")}));
  ByteReader reader(wire);
  FieldTable decoded;
  ASSERT_EQ(decode_table(reader, decoded), TableError::none);
  ASSERT_EQ(decoded.entries.size(), 3u);
  EXPECT_TRUE(std::isnan(std::get<float>(decoded.entries[0].second.value)));
  EXPECT_TRUE(std::isnan(std::get<double>(decoded.entries[1].second.value)));
  EXPECT_TRUE(std::signbit(std::get<float>(decoded.entries[2].second.value)));
  Bytes encoded;
  ByteWriter writer(encoded);
  ASSERT_TRUE(encode_table(writer, decoded));
  EXPECT_EQ(as_hex(encoded), as_hex(wire));
}

// The every-letter table, spelled out: decoded, it is the value; encoded, it is the bytes.
Bytes every_letter_bytes() {
  Bytes nested = sized(hex("04 64 65 65 70  53 00 00 00 02 65 72"));  // {"deep": S "er"}
  Bytes array = sized(cat({hex("49 ff ff ff ff  53 00 00 00 00  46"), nested}));
  return sized(cat({
      hex("01 74 74 01"),                       // t true
      hex("01 62 62 80"),                       // b -128
      hex("01 42 42 ff"),                       // B 255
      hex("01 73 73 ff fe"),                    // s -2
      hex("01 75 75 ff ff"),                    // u 65535
      hex("01 49 49 80 00 00 00"),              // I min
      hex("01 69 69 ff ff ff ff"),              // i max
      hex("01 6c 6c ff ff ff ff ff ff ff fb"),  // l -5
      hex("01 66 66 3f c0 00 00"),              // f 1.5
      hex("01 64 64 bf d0 00 00 00 00 00 00"),  // d -0.25
      hex("01 44 44 02 00 00 30 39"),           // D 123.45
      hex("01 53 53 00 00 00 04 74 65 78 74"),  // S "text"
      hex("01 41 41"),
      array,                                    // A [I -1, S "", F nested]
      hex("01 54 54 00 00 00 00 65 53 f1 00"),  // T 1700000000
      hex("01 46 46"),
      nested,                             // F nested
      hex("01 56 56"),                    // V
      hex("01 78 78 00 00 00 02 00 ff"),  // x "\0\xff"
  }));
}

TEST(EveryLetterTable, DecodesToTheValue) {
  Bytes wire = every_letter_bytes();
  ByteReader reader(wire);
  FieldTable decoded;
  ASSERT_EQ(decode_table(reader, decoded), TableError::none);
  EXPECT_TRUE(reader.at_end());
  EXPECT_EQ(decoded, test::every_letter_table());
}

TEST(EveryLetterTable, EncodesToTheBytes) {
  Bytes encoded;
  ByteWriter writer(encoded);
  ASSERT_TRUE(encode_table(writer, test::every_letter_table()));
  EXPECT_EQ(as_hex(encoded), as_hex(every_letter_bytes()));
}

TEST(EveryLetterTable, RoundTripGivesIdenticalBytes) {
  Bytes wire = every_letter_bytes();
  ByteReader reader(wire);
  FieldTable decoded;
  ASSERT_EQ(decode_table(reader, decoded), TableError::none);
  Bytes encoded;
  ByteWriter writer(encoded);
  ASSERT_TRUE(encode_table(writer, decoded));
  EXPECT_EQ(as_hex(encoded), as_hex(wire));
}

// Fed one byte at a time, with bytes after the table: truncated until the table is whole,
// then the table, with the reader stopped exactly at its end.
TEST(EveryLetterTable, ByteByByteWithTrailingGarbage) {
  Bytes table = every_letter_bytes();
  Bytes wire = cat({table, hex("de ad be ef")});
  for (std::size_t n = 0; n <= wire.size(); ++n) {
    ByteReader reader(ByteView(wire).first(n));
    FieldTable decoded;
    TableError error = decode_table(reader, decoded);
    if (n < table.size()) {
      EXPECT_EQ(error, TableError::truncated) << "prefix of " << n;
    } else {
      ASSERT_EQ(error, TableError::none) << "prefix of " << n;
      EXPECT_EQ(reader.position(), table.size());
      EXPECT_EQ(reader.remaining(), n - table.size());
      EXPECT_EQ(decoded, test::every_letter_table());
    }
  }
}

// The table that `wire` holds, which must decode without an error.
FieldTable decoded_table(const Bytes& wire) {
  ByteReader reader(wire);
  FieldTable decoded;
  EXPECT_EQ(decode_table(reader, decoded), TableError::none) << to_hex(wire);
  return decoded;
}

TEST(FieldTableOrder, KeepsEntryOrderAndDuplicateNames) {
  Bytes wire = sized(hex("01 62 42 01  01 61 42 02  01 62 42 03"));
  FieldTable decoded = decoded_table(wire);
  ASSERT_EQ(decoded.entries.size(), 3u);
  EXPECT_EQ(decoded.entries[0].first, "b");
  EXPECT_EQ(decoded.entries[1].first, "a");
  EXPECT_EQ(decoded.entries[2].first, "b");
  EXPECT_EQ(decoded.find("b")->as_int(), 1);  // the first of two
  Bytes encoded;
  ByteWriter writer(encoded);
  ASSERT_TRUE(encode_table(writer, decoded));
  EXPECT_EQ(as_hex(encoded), as_hex(wire));
}

TEST(FieldTableOrder, EmptyNameAndEmptyTable) {
  FieldTable decoded = decoded_table(sized(hex("00 56")));
  ASSERT_EQ(decoded.entries.size(), 1u);
  EXPECT_EQ(decoded.entries[0].first, "");

  EXPECT_TRUE(decoded_table(hex("00 00 00 00")).entries.empty());
}

// A reused output is replaced, not appended to: the session decodes into long-lived structs.
TEST(FieldTableOrder, DecodeReplacesWhatTheOutputHeld) {
  Bytes wire = sized(hex("01 61 42 01"));
  FieldTable decoded = test::every_letter_table();
  ByteReader reader(wire);
  ASSERT_EQ(decode_table(reader, decoded), TableError::none);
  EXPECT_EQ(decoded, one_u8_table());

  FieldArray array = mixed_array();
  Bytes array_wire = sized(hex("56"));
  ByteReader array_reader(array_wire);
  ASSERT_EQ(decode_array(array_reader, array), TableError::none);
  ASSERT_EQ(array.items.size(), 1u);
}

// RabbitMQ reads any non-zero octet as true; so do we, and write true back as 01.
TEST(FieldTableBooleans, NonCanonicalTrueIsReadAsTrueAndWrittenAsOne) {
  Bytes wire = sized(hex("01 6b 74 02"));
  ByteReader reader(wire);
  FieldTable decoded;
  ASSERT_EQ(decode_table(reader, decoded), TableError::none);
  EXPECT_EQ(decoded, one_entry(FieldValue::boolean(true)));
  Bytes encoded;
  ByteWriter writer(encoded);
  ASSERT_TRUE(encode_table(writer, decoded));
  EXPECT_EQ(as_hex(encoded), as_hex(sized(hex("01 6b 74 01"))));
}

}  // namespace
}  // namespace nackguard::amqp
