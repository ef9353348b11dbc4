// Replays every seed of the session fuzz target (tests/fuzz/corpus/fuzz_session/) through its
// script and checks, so the ordinary unit build keeps every regression seed fixed, even where
// libFuzzer is not built.
#include <gtest/gtest.h>

#include "amqp/fuzz_seeds.hpp"
#include "session/fuzz_script.hpp"

namespace nackguard::session {
namespace {

TEST(SessionCorpusReplay, EverySeedKeepsTheSessionsProperties) {
  const std::vector<amqp::test::Seed> seeds = amqp::test::seeds_of("fuzz_session");
  ASSERT_FALSE(seeds.empty()) << "no seeds in tests/fuzz/corpus/fuzz_session";
  for (const amqp::test::Seed& seed : seeds) {
    EXPECT_EQ(fuzz::run_script(seed.bytes), "") << "fuzz_session/" << seed.name;
  }
}

}  // namespace
}  // namespace nackguard::session
