// A connection's guard seed is not its number: two sidecars (or a sidecar and its restart)
// numbered their connections alike, and made the same copy ids in the same order.

#include "proxy/net/connection_seed.hpp"

#include <gtest/gtest.h>

#include <set>

namespace nackguard::net {
namespace {

TEST(ConnectionSeed, IsDrawnForTheProcessAndDiffersPerConnection) {
  std::set<std::uint64_t> seeds;
  for (std::uint64_t id = 0; id < 1000; ++id) {
    const std::uint64_t seed = connection_seed(id);
    EXPECT_NE(seed, id);
    EXPECT_EQ(seed, connection_seed(id));  // one process seed
    seeds.insert(seed);
  }
  EXPECT_EQ(seeds.size(), 1000u);
  // The part drawn for the process: what another sidecar would draw differently.
  EXPECT_EQ(connection_seed(7), mix64(process_seed() ^ mix64(7)));
}

}  // namespace
}  // namespace nackguard::net
