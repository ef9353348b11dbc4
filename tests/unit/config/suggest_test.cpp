#include "proxy/config/suggest.hpp"

#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <string>

namespace nackguard::config {
namespace {

constexpr std::array<std::string_view, 8> kTopKeys{"listen",  "upstream", "threads", "policies_dir",
                                                   "metrics", "log",      "limits",  "timeouts"};
constexpr std::array<std::string_view, 7> kLevels{"trace", "debug",    "info", "warn",
                                                  "error", "critical", "off"};

TEST(ClosestMatch, SuggestsNearMisses) {
  EXPECT_EQ(closest_match("thread", kTopKeys), "threads");
  EXPECT_EQ(closest_match("treads", kTopKeys), "threads");
  EXPECT_EQ(closest_match("polices_dir", kTopKeys), "policies_dir");
  EXPECT_EQ(closest_match("upsteam", kTopKeys), "upstream");
  EXPECT_EQ(closest_match("Listen", kTopKeys), "listen");
  EXPECT_EQ(closest_match("timeout", kTopKeys), "timeouts");
}

TEST(ClosestMatch, CountsASwapAsOneEdit) {
  constexpr std::array<std::string_view, 2> keys{"address", "port"};
  EXPECT_EQ(closest_match("prot", keys), "port");
  EXPECT_EQ(closest_match("adress", keys), "address");
}

TEST(ClosestMatch, AcceptsPrefixesAndCase) {
  EXPECT_EQ(closest_match("warning", kLevels), "warn");
  EXPECT_EQ(closest_match("INFO", kLevels), "info");
  EXPECT_EQ(closest_match("crit", kLevels), "critical");
}

TEST(ClosestMatch, StaysQuietWhenNothingIsClose) {
  constexpr std::array<std::string_view, 2> keys{"address", "port"};
  EXPECT_EQ(closest_match("host", keys), std::nullopt);
  EXPECT_EQ(closest_match("verbose", kLevels), std::nullopt);
  EXPECT_EQ(closest_match("x", kTopKeys), std::nullopt);
  EXPECT_EQ(closest_match("", kTopKeys), std::nullopt);
}

TEST(Join, SeparatesWithCommas) {
  constexpr std::array<std::string_view, 3> items{"a", "b", "c"};
  EXPECT_EQ(join(items), "a, b, c");
  EXPECT_EQ(join(std::span<const std::string_view>()), "");
}

}  // namespace
}  // namespace nackguard::config
