#include "proxy/metrics/text_format.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace nackguard::metrics {
namespace {

std::string label(std::string_view value) {
  std::string out;
  append_label_value(out, value);
  return out;
}

std::string help(std::string_view text) {
  std::string out;
  append_help(out, text);
  return out;
}

template <typename T>
std::string value(T v) {
  std::string out;
  append_value(out, v);
  return out;
}

struct EscapeCase {
  const char* name;
  std::string input;
  std::string expected;
};

class LabelValueEscaping : public testing::TestWithParam<EscapeCase> {};

TEST_P(LabelValueEscaping, EscapesPerTextFormat) {
  EXPECT_EQ(label(GetParam().input), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LabelValueEscaping,
    testing::Values(
        EscapeCase{"plain", "orders.eu-1", "orders.eu-1"}, EscapeCase{"empty", "", ""},
        EscapeCase{"backslash", R"(a\b)", R"(a\\b)"},
        EscapeCase{"double_quote", R"(say "hi")", R"(say \"hi\")"},
        EscapeCase{"newline", "two\nlines", R"(two\nlines)"},
        EscapeCase{"all_three", "\\\"\n", R"(\\\"\n)"},
        EscapeCase{"tab_and_cr_kept", "a\tb\rc", "a\tb\rc"},
        EscapeCase{"utf8_kept", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x90\x87",
                   "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x90\x87"},
        EscapeCase{"invalid_byte_replaced", "a\xFFz", "a\xEF\xBF\xBDz"},
        EscapeCase{"truncated_sequence_replaced", "a\xE2\x82", "a\xEF\xBF\xBD\xEF\xBF\xBD"},
        EscapeCase{"overlong_replaced", "\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        EscapeCase{"surrogate_replaced", "\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        EscapeCase{"nul_kept", std::string("a\0b", 3), std::string("a\0b", 3)}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Help, EscapesBackslashAndNewlineButNotQuotes) {
  EXPECT_EQ(help("a \"b\" \\ c\nd"), "a \"b\" \\\\ c\\nd");
}

TEST(Value, Integers) {
  EXPECT_EQ(value(std::uint64_t{0}), "0");
  EXPECT_EQ(value(std::numeric_limits<std::uint64_t>::max()), "18446744073709551615");
  EXPECT_EQ(value(std::int64_t{-3}), "-3");
}

TEST(Value, Doubles) {
  EXPECT_EQ(value(3.0), "3");
  EXPECT_EQ(value(-0.0), "0");
  EXPECT_EQ(value(268435456.0), "268435456");
  EXPECT_EQ(value(0.25), "0.25");
  EXPECT_EQ(value(1e300), "1e+300");
  EXPECT_EQ(value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(value(std::nan("")), "NaN");
}

}  // namespace
}  // namespace nackguard::metrics
