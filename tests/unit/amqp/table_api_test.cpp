// Field tables as code uses them: what encode_table refuses (a name over 255 bytes, a value
// its letter cannot hold, at any depth), and the accessors (as_int, as_string, set, find).
// table_test.cpp checks the wire form of every type letter.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/table.hpp"

namespace nackguard::amqp {
namespace {

struct BadEncodeCase {
  const char* name;
  FieldTable table;
};

void PrintTo(const BadEncodeCase& c, std::ostream* os) {
  *os << c.name;
}

class EncodeTableRefuses : public ::testing::TestWithParam<BadEncodeCase> {};

TEST_P(EncodeTableRefuses, ReturnsFalse) {
  Bytes encoded;
  ByteWriter writer(encoded);
  EXPECT_FALSE(encode_table(writer, GetParam().table));
}

FieldTable table_with(std::string name, FieldValue value) {
  FieldTable table;
  table.set(std::move(name), std::move(value));
  return table;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EncodeTableRefuses,
    ::testing::Values(
        BadEncodeCase{"name_over_255_bytes", table_with(std::string(256, 'n'), FieldValue::none())},
        BadEncodeCase{"unknown_letter_Z", table_with("k", FieldValue{'Z', std::int32_t{1}})},
        BadEncodeCase{"letter_I_holding_a_string", table_with("k", FieldValue{'I', std::string()})},
        BadEncodeCase{"letter_S_holding_an_int", table_with("k", FieldValue{'S', std::int32_t{1}})},
        BadEncodeCase{
            "bad_letter_nested_in_an_array",
            table_with("k", FieldValue::array(FieldArray{{FieldValue{'U', std::int16_t{1}}}}))},
        BadEncodeCase{"bad_letter_nested_in_a_table",
                      table_with("k", FieldValue::table(table_with("j", FieldValue{'t', 1.0})))}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(EncodeTable, NameOfExactly255BytesIsAccepted) {
  Bytes encoded;
  ByteWriter writer(encoded);
  ASSERT_TRUE(encode_table(writer, table_with(std::string(255, 'n'), FieldValue::none())));
  EXPECT_EQ(encoded.size(), 4u + 1 + 255 + 1);
}

TEST(FieldValueAsInt, EveryIntegerLetterAndNothingElse) {
  EXPECT_EQ(FieldValue::i8(-3).as_int(), -3);
  EXPECT_EQ(FieldValue::u8(200).as_int(), 200);
  EXPECT_EQ(FieldValue::i16(-300).as_int(), -300);
  EXPECT_EQ(FieldValue::u16(60000).as_int(), 60000);
  EXPECT_EQ(FieldValue::i32(-70000).as_int(), -70000);
  EXPECT_EQ(FieldValue::u32(4000000000u).as_int(), 4000000000);
  EXPECT_EQ(FieldValue::i64(-5).as_int(), -5);
  EXPECT_EQ(FieldValue::timestamp(7).as_int(), 7);
  EXPECT_EQ(FieldValue::timestamp(~std::uint64_t{0}).as_int(), std::nullopt);
  EXPECT_EQ(FieldValue::boolean(true).as_int(), std::nullopt);
  EXPECT_EQ(FieldValue::string("1").as_int(), std::nullopt);
  EXPECT_EQ(FieldValue::f64(1.0).as_int(), std::nullopt);
  EXPECT_EQ(FieldValue::none().as_int(), std::nullopt);
}

TEST(FieldValueAsString, StringAndBytesOnly) {
  ASSERT_NE(FieldValue::string("a").as_string(), nullptr);
  EXPECT_EQ(*FieldValue::bytes("b").as_string(), "b");
  EXPECT_EQ(FieldValue::i32(1).as_string(), nullptr);
}

TEST(FieldTableSet, ReplacesOrAppends) {
  FieldTable table;
  table.set("a", FieldValue::i32(1));
  table.set("b", FieldValue::i32(2));
  table.set("a", FieldValue::string("x"));
  ASSERT_EQ(table.entries.size(), 2u);
  EXPECT_EQ(table.entries[0].first, "a");
  EXPECT_EQ(*table.find("a"), FieldValue::string("x"));
  EXPECT_EQ(table.find("c"), nullptr);
}

}  // namespace
}  // namespace nackguard::amqp
