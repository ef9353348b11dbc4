// Replays every fuzz seed in tests/fuzz/corpus/ through the fuzz targets' own checks, so the
// ordinary unit build keeps every regression seed fixed, even where libFuzzer is not built.
// Seeds captured from RabbitMQ (named broker-* or client-*) must also decode: they are real
// frames, and a codec that refuses them is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "amqp/all_methods.hpp"
#include "amqp/codec_invariants.hpp"
#include "amqp/codec_test_support.hpp"
#include "amqp/fuzz_seeds.hpp"
#include "proxy/amqp/method_name.hpp"

namespace nackguard::amqp {
namespace {

using test::Seed;
using test::seeds_of;

bool captured(const std::string& name) {
  return name.starts_with("broker-") || name.starts_with("client-");
}

void replay(const std::string& target, test::CheckResult (*check)(ByteView)) {
  std::vector<Seed> seeds = seeds_of(target);
  ASSERT_FALSE(seeds.empty()) << "no seeds in tests/fuzz/corpus/" << target;
  std::size_t real = 0;
  for (const Seed& seed : seeds) {
    test::CheckResult result = check(seed.bytes);
    EXPECT_EQ(result.broken, "") << target << "/" << seed.name;
    if (captured(seed.name)) {
      ++real;
      EXPECT_TRUE(result.decoded) << target << "/" << seed.name << " is a real frame";
    }
  }
  EXPECT_GT(real, 0u) << "no seeds captured from RabbitMQ in " << target;
}

TEST(CorpusReplay, FrameDecoder) {
  replay("fuzz_frame_decoder", test::check_frame_stream);
}
TEST(CorpusReplay, Methods) {
  replay("fuzz_methods", test::check_methods);
}
TEST(CorpusReplay, FieldTable) {
  replay("fuzz_field_table", test::check_field_table);
}
TEST(CorpusReplay, ContentHeader) {
  replay("fuzz_content_header", test::check_content_header);
}

// Inputs libFuzzer always tries first, and a few it would take a while to reach.
TEST(CorpusReplay, ChecksHoldForEdgeInputs) {
  const Bytes inputs[] = {
      {},
      {0x00},
      {0x00, 0x3c, 0x00},
      {0x00, 0x3c, 0x00, 0x3c},
      {0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xce},
      {'A', 'M', 'Q', 'P', 0x00, 0x00, 0x09, 0x01},
      {0x00, 0x00, 0x00, 0x00},
      {0xff, 0xff, 0xff, 0xff},
  };
  for (const Bytes& input : inputs) {
    std::string hex = test::to_hex(input);
    EXPECT_EQ(test::check_frame_stream(input).broken, "") << hex;
    EXPECT_EQ(test::check_methods(input).broken, "") << hex;
    EXPECT_EQ(test::check_field_table(input).broken, "") << hex;
    EXPECT_EQ(test::check_content_header(input).broken, "") << hex;
  }
}

// A captured method seed is named after its method ("broker-basic.deliver.bin",
// "client-basic.nack-2.bin"): the name must be what the payload says.
TEST(CorpusReplay, CapturedMethodSeedsAreNamedAfterTheirMethod) {
  for (const Seed& seed : seeds_of("fuzz_methods")) {
    if (!captured(seed.name)) continue;
    std::optional<std::uint32_t> key = peek_method_key(seed.bytes);
    ASSERT_TRUE(key.has_value()) << seed.name;
    std::string name(method_name(*key));
    std::string after_side = seed.name.substr(seed.name.find('-') + 1);
    bool named_right = after_side == name + ".bin";
    if (!named_right && after_side.starts_with(name + "-") && after_side.ends_with(".bin")) {
      std::string number = after_side.substr(name.size() + 1, after_side.size() - name.size() - 5);
      named_right = !number.empty() && std::all_of(number.begin(), number.end(),
                                                   [](char c) { return c >= '0' && c <= '9'; });
    }
    EXPECT_TRUE(named_right) << seed.name << " holds " << name;
  }
}

}  // namespace
}  // namespace nackguard::amqp
