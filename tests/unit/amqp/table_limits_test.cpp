// Field tables from a hostile peer: nesting, value counts, lengths past the end, and unknown
// type letters, each a named case with its exact error.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "amqp/codec_test_support.hpp"
#include "amqp/error_text_check.hpp"
#include "proxy/amqp/table.hpp"

namespace nackguard::amqp {
namespace {

using test::cat;
using test::hex;
using test::sized;
using test::u32_be;

enum class Nest { tables, arrays, alternating };

// A value nested `depth` levels deep, counting the outermost table or array as level 1; the
// innermost one holds `leaf` (a table body or an array body). Built front to back in one pass,
// since every nested value is the last thing in its parent.
Bytes nested(std::size_t depth, Nest nest, const Bytes& leaf) {
  auto is_table = [&](std::size_t level) {
    return nest == Nest::tables || (nest == Nest::alternating && level % 2 == 1);
  };
  // What sits between a level's length and the next level's length: a table holds the entry
  // name "a" then 'F' or 'A'; an array holds the letter alone.
  auto link = [&](std::size_t level) -> Bytes {
    Bytes name = is_table(level) ? hex("01 61") : Bytes{};
    return cat({name, Bytes{static_cast<std::uint8_t>(is_table(level + 1) ? 'F' : 'A')}});
  };
  std::size_t size = leaf.size();
  for (std::size_t level = depth; level-- > 1;) size += 4 + link(level).size();
  Bytes out;
  out.reserve(size + 4);
  for (std::size_t level = 1; level < depth; ++level) {
    Bytes to_next = link(level);
    Bytes length = u32_be(static_cast<std::uint32_t>(size));
    out.insert(out.end(), length.begin(), length.end());
    out.insert(out.end(), to_next.begin(), to_next.end());
    size -= to_next.size() + 4;
  }
  Bytes last = sized(leaf);
  out.insert(out.end(), last.begin(), last.end());
  return out;
}

TableError decode_as(Nest nest, const Bytes& wire, const TableLimits& limits = {}) {
  ByteReader reader(wire);
  if (nest == Nest::arrays) {
    FieldArray array;
    return decode_array(reader, array, limits);
  }
  FieldTable table;
  return decode_table(reader, table, limits);
}

TEST(TableNesting, BuilderSpellsTheExpectedBytes) {
  // {"a": {"a": []}}: depth 3, innermost an empty array body.
  EXPECT_EQ(test::as_hex(nested(3, Nest::tables, {})),
            test::as_hex(hex("00 00 00 0e 01 61 46  00 00 00 07 01 61 46  00 00 00 00")));
  EXPECT_EQ(test::as_hex(nested(2, Nest::arrays, hex("56"))),
            test::as_hex(hex("00 00 00 06 41  00 00 00 01 56")));
}

struct NestCase {
  const char* name;
  Nest nest;
};

void PrintTo(const NestCase& c, std::ostream* os) {
  *os << c.name;
}

class TableNesting : public ::testing::TestWithParam<NestCase> {};

TEST_P(TableNesting, MaxDepthIsAcceptedOneMoreIsTooDeep) {
  const TableLimits defaults;
  EXPECT_EQ(decode_as(GetParam().nest, nested(defaults.max_depth, GetParam().nest, {})),
            TableError::none);
  EXPECT_EQ(decode_as(GetParam().nest, nested(defaults.max_depth + 1, GetParam().nest, {})),
            TableError::too_deep);
}

TEST_P(TableNesting, ASmallerLimitIsHonoured) {
  TableLimits limits;
  limits.max_depth = 4;
  EXPECT_EQ(decode_as(GetParam().nest, nested(4, GetParam().nest, {}), limits), TableError::none);
  EXPECT_EQ(decode_as(GetParam().nest, nested(5, GetParam().nest, {}), limits),
            TableError::too_deep);
}

// 10,000 levels, built in memory. The innermost level holds an unknown letter: answering
// too_deep rather than unknown_type shows the decoder stopped at the limit instead of
// recursing down to it, and not crashing shows the stack was never at risk.
TEST_P(TableNesting, TenThousandLevelsStopAtTheLimit) {
  // Level 10,000 is a table only when every level is (alternating starts with a table).
  Bytes leaf = GetParam().nest == Nest::tables ? hex("01 61 5a") : hex("5a");
  Bytes wire = nested(10'000, GetParam().nest, leaf);
  EXPECT_EQ(decode_as(GetParam().nest, wire), TableError::too_deep);
}

// The same depth with lengths that cannot all be right: each claims 0xFFFFFFFF, so the
// outermost length is already past the end.
TEST_P(TableNesting, TenThousandLevelsWithHugeLengthsAreTruncated) {
  Bytes wire;
  for (int level = 0; level < 10'000; ++level) {
    Bytes step =
        GetParam().nest == Nest::arrays ? hex("ff ff ff ff 41") : hex("ff ff ff ff 01 61 46");
    wire.insert(wire.end(), step.begin(), step.end());
  }
  EXPECT_EQ(decode_as(GetParam().nest, wire), TableError::truncated);
}

INSTANTIATE_TEST_SUITE_P(Kinds, TableNesting,
                         ::testing::Values(NestCase{"tables", Nest::tables},
                                           NestCase{"arrays", Nest::arrays},
                                           NestCase{"alternating", Nest::alternating}),
                         [](const auto& info) { return std::string(info.param.name); });

Bytes n_voids_in_a_table(std::size_t n) {
  Bytes body;
  body.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    body.push_back(0);  // empty name
    body.push_back('V');
  }
  return sized(body);
}

TEST(TableValueCount, DefaultLimitAcceptsExactlyMaxValues) {
  const TableLimits defaults;
  EXPECT_EQ(decode_as(Nest::tables, n_voids_in_a_table(defaults.max_values)), TableError::none);
  EXPECT_EQ(decode_as(Nest::tables, n_voids_in_a_table(defaults.max_values + 1)),
            TableError::too_many_values);
}

struct CountCase {
  const char* name;
  Nest nest;
  Bytes wire;
  TableError expected;
};

void PrintTo(const CountCase& c, std::ostream* os) {
  *os << c.name;
}

class TableValueCount : public ::testing::TestWithParam<CountCase> {};

// With max_values = 3: every value counts, nested ones and the nested table itself included.
TEST_P(TableValueCount, CountsValuesAtAllLevels) {
  TableLimits limits;
  limits.max_values = 3;
  EXPECT_EQ(decode_as(GetParam().nest, GetParam().wire, limits), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TableValueCount,
    ::testing::Values(
        CountCase{"three_flat", Nest::tables, sized(hex("00 56 00 56 00 56")), TableError::none},
        CountCase{"four_flat", Nest::tables, sized(hex("00 56 00 56 00 56 00 56")),
                  TableError::too_many_values},
        CountCase{"table_holding_two", Nest::tables,
                  sized(cat({hex("00 46"), sized(hex("00 56 00 56"))})), TableError::none},
        CountCase{"table_holding_three", Nest::tables,
                  sized(cat({hex("00 46"), sized(hex("00 56 00 56 00 56"))})),
                  TableError::too_many_values},
        CountCase{"array_of_three", Nest::arrays, sized(hex("56 56 56")), TableError::none},
        CountCase{"array_of_four", Nest::arrays, sized(hex("56 56 56 56")),
                  TableError::too_many_values},
        CountCase{"array_in_table_of_four", Nest::tables,
                  sized(cat({hex("00 41"), sized(hex("56 56 56"))})), TableError::too_many_values}),
    [](const auto& info) { return std::string(info.param.name); });

struct MalformedCase {
  const char* name;
  Bytes wire;
  TableError expected;
};

void PrintTo(const MalformedCase& c, std::ostream* os) {
  *os << c.name;
}

class MalformedTable : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedTable, IsRefusedWithItsError) {
  ByteReader reader(GetParam().wire);
  FieldTable table;
  EXPECT_EQ(decode_table(reader, table), GetParam().expected);
}

constexpr TableError kTruncated = TableError::truncated;
constexpr TableError kUnknownType = TableError::unknown_type;

const MalformedCase kMalformedCases[] = {
    {"empty_input", {}, kTruncated},
    {"length_cut_short", hex("00 00 00"), kTruncated},
    {"length_past_the_end", hex("00 00 00 05 01 61 56"), kTruncated},
    {"length_ffffffff", hex("ff ff ff ff 01 61 56"), kTruncated},
    {"length_ffffffff_nothing_after", hex("ff ff ff ff"), kTruncated},
    {"length_80000000", hex("80 00 00 00 00 56"), kTruncated},
    {"name_past_the_end", hex("00 00 00 03 05 61 62"), kTruncated},
    {"name_without_a_value", hex("00 00 00 02 01 61"), kTruncated},
    {"int_cut_short", hex("00 00 00 05 01 61 49 00 00"), kTruncated},
    {"string_length_past_its_table", hex("00 00 00 08 01 61 53 00 00 00 05 78"), kTruncated},
    {"string_length_ffffffff", hex("00 00 00 07 01 61 53 ff ff ff ff"), kTruncated},
    {"nested_table_length_ffffffff", hex("00 00 00 07 01 61 46 ff ff ff ff"), kTruncated},
    {"nested_array_length_ffffffff", hex("00 00 00 07 01 61 41 ff ff ff ff"), kTruncated},
    {"nested_length_past_its_parent", hex("00 00 00 08 01 61 46 00 00 00 02 00 56 00 56"),
     kTruncated},
    {"decimal_cut_short", hex("00 00 00 06 01 61 44 02 00 00"), kTruncated},
    {"unknown_letter_Z", hex("00 00 00 07 01 61 5a 00 00 00 00"), kUnknownType},
    // 'U' is the 0-9-1 spec's short-int; RabbitMQ writes 's' and never 'U'.
    {"unknown_letter_U", hex("00 00 00 05 01 61 55 00 01"), kUnknownType},
    {"unknown_letter_at_the_end", hex("00 00 00 03 01 61 5a"), kUnknownType},
    {"unknown_letter_nul", hex("00 00 00 03 01 61 00"), kUnknownType},
    {"unknown_letter_in_an_array", hex("00 00 00 09 01 61 41 00 00 00 02 56 5a"), kUnknownType},
    {"unknown_letter_after_a_good_entry", hex("00 00 00 06 01 61 56 01 62 5a"), kUnknownType},
};

INSTANTIATE_TEST_SUITE_P(Cases, MalformedTable, ::testing::ValuesIn(kMalformedCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TableErrorText, EveryErrorHasItsOwnText) {
  test::expect_each_error_has_its_own_text({TableError::none, TableError::truncated,
                                            TableError::unknown_type, TableError::too_deep,
                                            TableError::too_many_values});
}

}  // namespace
}  // namespace nackguard::amqp
