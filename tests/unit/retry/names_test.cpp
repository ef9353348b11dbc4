// The one rule that fits every name nackguard builds into AMQP's 255 bytes (retry/names.hpp).

#include "proxy/retry/names.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace nackguard::retry {
namespace {

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xE  ? 3
                    : (c >> 3) == 0x1E ? 4
                                       : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(FitName, NamesOf255BytesOrFewerAreLeftAsTheyAre) {
  EXPECT_EQ(fit_name(""), "");
  EXPECT_EQ(fit_name("orders.dlq", 4), "orders.dlq");
  std::string exact(255, 'n');
  EXPECT_EQ(fit_name(exact), exact);
  EXPECT_EQ(fit_name(exact, 4), exact);
}

TEST(FitName, ALongerNameKeepsItsBeginningAndEndingAroundAHash) {
  std::string name = std::string(300, 'a') + ".dlq";
  std::string fitted = fit_name(name, 4);
  ASSERT_EQ(fitted.size(), 255u);
  EXPECT_EQ(fitted.substr(0, 234), std::string(234, 'a'));
  EXPECT_EQ(fitted[234], '~');
  EXPECT_EQ(fitted.substr(235, 16).find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_TRUE(fitted.ends_with(".dlq"));
}

// The value is pinned: every replica, build and version maps a name the same way, so they
// all use the same DLQ. Changing the rule changes this value (and moves users' DLQs).
TEST(FitName, TheHashIsStable) {
  std::string name = std::string(260, 'q') + ".dlq";
  // XXH3-64 of the 264 bytes (seed 0), as XXH3_64bits in libxxhash computes it.
  EXPECT_EQ(fit_name(name, 4), std::string(234, 'q') + "~7df4acdf0b31268c.dlq");
  EXPECT_EQ(fit_name(name, 4), fit_name(std::string(name), 4));
}

TEST(FitName, DistinctLongNamesStayDistinct) {
  std::set<std::string> fitted;
  const std::string common(300, 'x');
  for (int i = 0; i < 1000; ++i) {
    std::string name = common + std::to_string(i) + ".dlq";
    std::string f = fit_name(name, 4);
    EXPECT_LE(f.size(), 255u);
    fitted.insert(f);
  }
  EXPECT_EQ(fitted.size(), 1000u);
  // Names 256 to 300 bytes long that differ only in length.
  for (std::size_t n = 256; n <= 300; ++n) fitted.insert(fit_name(std::string(n, 'x')));
  EXPECT_EQ(fitted.size(), 1045u);
}

TEST(FitName, NeverCutsInsideAMultiByteCharacter) {
  for (std::size_t lead = 0; lead < 4; ++lead) {
    std::string name(lead, 'a');
    for (int i = 0; i < 100; ++i) name += "\xE2\x82\xAC";  // the euro sign, 3 bytes
    name += ".dlq";
    std::string fitted = fit_name(name, 4);
    EXPECT_LE(fitted.size(), 255u);
    EXPECT_GE(fitted.size(), 253u);
    EXPECT_TRUE(valid_utf8(fitted)) << lead;
    EXPECT_TRUE(fitted.ends_with(".dlq"));
  }
}

TEST(FitName, AnEndingTooLongToLeaveRoomIsCutWithTheRest) {
  std::string name = "q" + std::string(300, 'e');
  std::string fitted = fit_name(name, 300);
  ASSERT_EQ(fitted.size(), 255u);
  EXPECT_EQ(fitted.substr(0, 238), name.substr(0, 238));
  EXPECT_EQ(fitted[238], '~');
}

TEST(DeadLetterRoutingKey, QueueNamesOf250To255Bytes) {
  DeadLetter dl;  // "{queue}.dlq"
  for (std::size_t n = 250; n <= 255; ++n) {
    std::string queue(n, 'q');
    std::string key = dead_letter_routing_key(dl, queue);
    EXPECT_LE(key.size(), 255u) << n;
    EXPECT_TRUE(key.ends_with(".dlq")) << n;
    if (n <= 251) {
      EXPECT_EQ(key, queue + ".dlq");
    } else {
      EXPECT_EQ(key.size(), 255u);
      EXPECT_EQ(key, fit_name(queue + ".dlq", 4));
    }
  }
  EXPECT_NE(dead_letter_routing_key(dl, std::string(254, 'q')),
            dead_letter_routing_key(dl, std::string(255, 'q')));
}

TEST(DeadLetterRoutingKey, KeepsTheTemplatesTextAfterItsLastPlaceholder) {
  DeadLetter dl;
  dl.exchange = "dead";
  dl.routing_key = "dead.{queue}.{queue}.parked";
  std::string queue(200, 'o');
  std::string key = dead_letter_routing_key(dl, queue);
  std::string full = "dead." + queue + "." + queue + ".parked";
  ASSERT_EQ(key.size(), 255u);
  EXPECT_EQ(key, fit_name(full, 7));
  EXPECT_TRUE(key.starts_with("dead." + queue));
  EXPECT_TRUE(key.ends_with(".parked"));
  // A template without a placeholder is fixed; short ones stay as written.
  dl.routing_key = "all-dead";
  EXPECT_EQ(dead_letter_routing_key(dl, queue), "all-dead");
  dl.routing_key = "{queue}";
  EXPECT_EQ(dead_letter_routing_key(dl, "orders"), "orders");
}

}  // namespace
}  // namespace nackguard::retry
