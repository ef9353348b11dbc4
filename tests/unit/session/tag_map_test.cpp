// The tag map alone: the client's tags numbered without the proxy's gaps, and the runs that
// map untracked deliveries (ChannelState and the takeover tests check the same through a
// Session).

#include <gtest/gtest.h>

#include "proxy/session/tag_map.hpp"

namespace nackguard::session {
namespace {

TEST(TagMap, TheSequencesAreIdenticalUntilTheProxyOwnsADelivery) {
  TagMap tags;
  EXPECT_TRUE(tags.identical());
  EXPECT_EQ(tags.next_client_tag(), 1u);
  tags.note_owned();
  EXPECT_FALSE(tags.identical());
  EXPECT_EQ(tags.next_client_tag(), 2u);
  EXPECT_EQ(tags.last_client_tag(), 2u);
}

TEST(TagMap, UntrackedDeliveriesWithOneOffsetShareARun) {
  TagMap tags;
  bool new_run = false;
  // Broker tag 2 was the proxy's: client tags 2 and 3 are broker tags 3 and 4.
  ASSERT_TRUE(tags.note_untracked(2, 3, &new_run));
  EXPECT_TRUE(new_run);
  tags.note_handed_out(2, 3);
  ASSERT_TRUE(tags.note_untracked(3, 4, &new_run));
  EXPECT_FALSE(new_run);
  EXPECT_EQ(tags.run_broker_tag(2), 3u);
  EXPECT_EQ(tags.run_broker_tag(3), 4u);
  EXPECT_FALSE(tags.run_broker_tag(1));
  EXPECT_FALSE(tags.run_broker_tag(4));
  EXPECT_TRUE(tags.run_starts_below(4));
  EXPECT_FALSE(tags.run_starts_below(3));
}

TEST(TagMap, ADeliveryWithAnotherOffsetEndsTheRun) {
  TagMap tags;
  bool new_run = false;
  ASSERT_TRUE(tags.note_untracked(1, 1, &new_run));
  tags.note_handed_out(2, 3);  // recorded, with offset 1: the next untracked one starts a run
  ASSERT_TRUE(tags.note_untracked(3, 4, &new_run));
  EXPECT_TRUE(new_run);
  EXPECT_EQ(tags.run_broker_tag(1), 1u);
  EXPECT_EQ(tags.run_broker_tag(3), 4u);
}

TEST(TagMap, PastTheLastRunNoMoreStart) {
  TagMap tags;
  bool new_run = false;
  for (std::uint64_t i = 0; i < TagMap::kMaxRuns; ++i) {
    // Every other client tag: each untracked one after a recorded one of another offset.
    ASSERT_TRUE(tags.note_untracked(2 * i + 1, 3 * i + 1, &new_run));
    tags.note_handed_out(2 * i + 2, 3 * i + 3);
  }
  EXPECT_FALSE(tags.note_untracked(2 * TagMap::kMaxRuns + 1, 4 * TagMap::kMaxRuns, &new_run));
}

TEST(TagMap, ABrokerTagBelowOneHandedOutMeansReordered) {
  TagMap tags;
  tags.note_handed_out(1, 5);
  EXPECT_FALSE(tags.reordered());
  tags.note_handed_out(2, 4);
  EXPECT_TRUE(tags.reordered());
}

}  // namespace
}  // namespace nackguard::session
