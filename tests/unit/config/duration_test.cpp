#include "proxy/config/duration.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace nackguard::config {
namespace {

using std::chrono::milliseconds;

struct GoodDuration {
  const char* text;
  milliseconds value;
};

class ParsesDuration : public ::testing::TestWithParam<GoodDuration> {};

TEST_P(ParsesDuration, ToMilliseconds) {
  EXPECT_EQ(parse_duration(GetParam().text), GetParam().value);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParsesDuration,
    ::testing::Values(GoodDuration{"500ms", milliseconds(500)},
                      GoodDuration{"10s", milliseconds(10'000)},
                      GoodDuration{"5m", milliseconds(300'000)},
                      GoodDuration{"24h", milliseconds(86'400'000)},
                      GoodDuration{"0s", milliseconds(0)}, GoodDuration{"1ms", milliseconds(1)},
                      GoodDuration{"007s", milliseconds(7'000)},
                      GoodDuration{"9223372036854775807ms", milliseconds::max()}));

struct BadDuration {
  const char* name;
  const char* text;
  const char* reason;  // part of the message that says what is wrong
};

const BadDuration kBadDurations[] = {
    {"BareNumber", "10", "the unit is missing"},
    {"UnitOnly", "s", "it does not start with a number"},
    {"Negative", "-1s", "cannot be negative"},
    {"UnknownUnit", "10x", "unknown unit \"x\""},
    {"LongUnitName", "10sec", "unknown unit \"sec\""},
    {"UpperCaseUnit", "10S", "unknown unit \"S\""},
    {"Empty", "", "it is empty"},
    {"Fraction", "1.5s", "fractions are not supported"},
    {"PlusSign", "+1s", "it does not start with a number"},
    {"SpaceBeforeUnit", "10 s", "unknown unit \" s\""},
    {"Compound", "1m30s", "unknown unit \"m30s\""},
    {"NumberOverflow", "99999999999999999999999s", "the number is too large"},
    {"MillisecondsOverflow", "9223372036854775808ms", "the duration is too large"},
    {"HoursOverflow", "2562047788015216h", "the duration is too large"},
};

class RejectsDuration : public ::testing::TestWithParam<BadDuration> {};

TEST_P(RejectsDuration, WithAReadableReason) {
  const BadDuration& bad = GetParam();
  try {
    parse_duration(bad.text);
    FAIL() << "accepted \"" << bad.text << "\"";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("invalid duration \"" + std::string(bad.text) + "\": "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(bad.reason), std::string::npos) << message;
    // Every rejection says how to write one.
    EXPECT_NE(message.find("units ms, s, m, h"), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, RejectsDuration, ::testing::ValuesIn(kBadDurations),
                         [](const ::testing::TestParamInfo<BadDuration>& info) {
                           return info.param.name;
                         });

TEST(FormatDuration, UsesTheLargestExactUnit) {
  EXPECT_EQ(format_duration(milliseconds(500)), "500ms");
  EXPECT_EQ(format_duration(milliseconds(1500)), "1500ms");
  EXPECT_EQ(format_duration(milliseconds(10'000)), "10s");
  EXPECT_EQ(format_duration(milliseconds(90'000)), "90s");
  EXPECT_EQ(format_duration(milliseconds(300'000)), "5m");
  EXPECT_EQ(format_duration(milliseconds(86'400'000)), "24h");
  EXPECT_EQ(format_duration(milliseconds(0)), "0ms");
}

TEST(FormatDuration, RoundTripsThroughParse) {
  for (const char* text : {"500ms", "10s", "5m", "24h", "1001ms", "61s"}) {
    EXPECT_EQ(format_duration(parse_duration(text)), text);
  }
}

}  // namespace
}  // namespace nackguard::config
